// extension.js with the REAL vscode-languageclient (from node_modules) and a
// real server process; only the `vscode` API is a stand-in (the parts the
// client library touches while it starts, syncs a document and shows
// diagnostics; anything else answers with a no-op). Not VS Code itself.
// Skipped before `npm install`; the MEM007 test also where `memlint` is not
// on PATH.
'use strict';

const assert = require('node:assert/strict');
const cp = require('node:child_process');
const fs = require('node:fs');
const Module = require('node:module');
const os = require('node:os');
const path = require('node:path');
const { pathToFileURL } = require('node:url');
const { test } = require('node:test');

const EXTENSION = path.join(__dirname, '..', 'extension.js');
const SOURCE = `import torch

model = torch.nn.Linear(2, 2).cuda()

def resume(path):
    model.load_state_dict(torch.load(path))
`;

function installed() {
  try {
    require.resolve('vscode-languageclient/node');
    return undefined;
  } catch {
    return 'vscode-languageclient not installed (run npm install)';
  }
}

function memlintOnPath() {
  const probe = cp.spawnSync('memlint', ['--version'], { encoding: 'utf8' });
  return probe.error || probe.status !== 0 ? '`memlint --version` did not run' : undefined;
}

const noop = () => ({ dispose() {} });

/** Answers any other property with a no-op (a function, or a bare class for
 * a capitalised name), as far as the client library goes. */
function lenient(object) {
  const made = new Map();
  return new Proxy(object, {
    get(target, key) {
      if (key in target || typeof key !== 'string') {
        return target[key];
      }
      if (/^[A-Z]/.test(key)) {
        if (!made.has(key)) made.set(key, class {});
        return made.get(key);
      }
      return /^(register|on|create)/.test(key) ? noop : undefined;
    },
  });
}

class EventEmitter {
  constructor() {
    this.listeners = [];
    this.event = (listener) => {
      this.listeners.push(listener);
      return { dispose() {} };
    };
  }

  fire(value) { this.listeners.forEach((listener) => listener(value)); }

  dispose() {}
}

class Disposable {
  constructor(callback) { this.callback = callback; }

  static from(...items) { return new Disposable(() => items.forEach((d) => d && d.dispose())); }

  dispose() { if (this.callback) this.callback(); }
}

class Uri {
  constructor(text) {
    const url = new URL(text);
    this.text = text;
    this.scheme = url.protocol.slice(0, -1);
    this.fsPath = decodeURIComponent(url.pathname);
    this.path = this.fsPath;
  }

  static parse(text) { return new Uri(text); }

  static file(fsPath) { return new Uri(pathToFileURL(fsPath).href); }

  toString() { return this.text; }
}

class Position {
  constructor(line, character) { Object.assign(this, { line, character }); }
}

class Range {
  constructor(a, b, c, d) {
    [this.start, this.end] = a instanceof Position ? [a, b] : [new Position(a, b), new Position(c, d)];
  }
}

class Diagnostic {
  constructor(range, message, severity) { Object.assign(this, { range, message, severity }); }
}

class CodeActionKind {
  constructor(value) { this.value = value; }

  append(part) { return new CodeActionKind(this.value ? `${this.value}.${part}` : part); }
}
for (const [name, value] of Object.entries({ Empty: '', QuickFix: 'quickfix', Refactor: 'refactor',
  RefactorExtract: 'refactor.extract', RefactorInline: 'refactor.inline',
  RefactorRewrite: 'refactor.rewrite', Source: 'source',
  SourceOrganizeImports: 'source.organizeImports' })) {
  CodeActionKind[name] = new CodeActionKind(value);
}

class CancellationTokenSource {
  constructor() { this.token = { isCancellationRequested: false, onCancellationRequested: noop }; }

  cancel() { this.token.isCancellationRequested = true; }

  dispose() {}
}

/** A stand-in `vscode` with `documents` open, recording what reaches the user. */
function fakeVscode(settings, documents) {
  const seen = { errors: [], diagnostics: new Map(), collections: [], output: [] };
  const matches = (selector, document) => [].concat(selector).some((filter) => (
    (filter.language === undefined || filter.language === document.languageId)
    && (filter.scheme === undefined || filter.scheme === document.uri.scheme)));
  const vscode = lenient({
    version: '1.82.0',
    EventEmitter, Disposable, Uri, Position, Range, Diagnostic, CancellationTokenSource,
    CodeActionKind,
    DiagnosticSeverity: { Error: 0, Warning: 1, Information: 2, Hint: 3 },
    workspace: lenient({
      workspaceFolders: undefined,
      textDocuments: documents,
      getConfiguration: () => ({
        get: (key, fallback) => (key in settings ? settings[key] : fallback),
        has: () => false,
      }),
    }),
    languages: lenient({
      match: (selector, document) => (matches(selector, document) ? 10 : 0),
      createDiagnosticCollection(name) {
        const collection = {
          name, disposed: false,
          set(uri, diagnostics) {
            seen.diagnostics.set(String(uri), diagnostics);
            seen.onDiagnostics?.();
          },
          delete() {}, clear() {}, forEach() {},
          dispose() { collection.disposed = true; },
        };
        seen.collections.push(collection);
        return collection;
      },
    }),
    window: lenient({
      activeTextEditor: undefined,
      tabGroups: { all: [], onDidChangeTabs: noop },
      createOutputChannel: (name) => ({
        name,
        append: (text) => seen.output.push(text),
        appendLine: (text) => seen.output.push(`${text}\n`),
        show() {}, hide() {}, clear() {}, replace() {}, dispose() {},
      }),
      showErrorMessage: async (message) => { seen.errors.push(message); },
      showWarningMessage: async () => undefined,
      showInformationMessage: async () => undefined,
    }),
    commands: lenient({ executeCommand: async () => undefined }),
    env: lenient({ language: 'en', appName: 'stand-in' }),
  });
  return { vscode, seen };
}

/** A fresh extension.js on the stand-in, activated with `settings`. */
async function activate(settings, documents = []) {
  const { vscode, seen } = fakeVscode(settings, documents);
  const load = Module._load;
  Module._load = function loadWithStandIn(request, parent, isMain) {
    return request === 'vscode' ? vscode : load.call(this, request, parent, isMain);
  };
  // The client library keeps `vscode` from its first load: load it afresh too.
  for (const key of Object.keys(require.cache)) {
    if (key === EXTENSION || key.includes(`${path.sep}vscode-languageclient${path.sep}`)) {
      delete require.cache[key];
    }
  }
  try {
    const extension = require(EXTENSION);
    await extension.activate({ subscriptions: [] });
    return { extension, seen };
  } finally {
    Module._load = load;
  }
}

function within(ms, promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Unhandled rejections while the test runs, instead of the runner's verdict. */
function unhandledRejections(t) {
  const runner = process.listeners('unhandledRejection');
  const caught = [];
  process.removeAllListeners('unhandledRejection');
  process.on('unhandledRejection', (error) => caught.push(error));
  t.after(() => {
    process.removeAllListeners('unhandledRejection');
    runner.forEach((listener) => process.on('unhandledRejection', listener));
  });
  return caught;
}

function scratch(t) {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'memlint-vscode-'));
  t.after(() => fs.rmSync(folder, { recursive: true, force: true }));
  return folder;
}

test('`memlint server` from the default settings: MEM007 arrives, deactivate stops it',
  { skip: installed() || memlintOnPath(), timeout: 120000 }, async (t) => {
    const folder = scratch(t);
    fs.writeFileSync(path.join(folder, 'pyproject.toml'), '[tool.memlint]\n');
    const file = path.join(folder, 'model.py');
    fs.writeFileSync(file, SOURCE);
    const document = { uri: Uri.file(file), fileName: file, languageId: 'python', version: 1,
                       isUntitled: false, lineCount: 6, getText: () => SOURCE };
    const { extension, seen } = await activate({}, [document]);
    assert.deepEqual(seen.errors, [], seen.output.join(''));
    const arrived = new Promise((resolve) => {
      seen.onDiagnostics = () => seen.diagnostics.has(String(document.uri)) && resolve();
      seen.onDiagnostics();
    });
    await within(60000, arrived, 'diagnostics');
    const found = seen.diagnostics.get(String(document.uri));
    const load = found.find((d) => d.code === 'MEM007');
    assert.ok(load, JSON.stringify(found));
    assert.equal(load.source, 'memlint');
    assert.deepEqual({ ...load.range.start }, { line: 5, character: 26 });
    await within(10000, extension.deactivate(), 'stop');
    assert.ok(seen.collections.every((c) => c.disposed), 'diagnostics not cleared on stop');
    assert.deepEqual(seen.errors, []);
  });

test('a command that is not there: one error naming it, with the fix',
  { skip: installed(), timeout: 60000 }, async () => {
    const { extension, seen } = await activate({ path: ['/nonexistent/bin/memlint'] });
    const ours = seen.errors.filter((m) => m.startsWith('memlint:'));
    assert.equal(ours.length, 1, seen.errors.join('\n'));
    assert.match(ours[0], /`\/nonexistent\/bin\/memlint server` \(command not found\)/);
    assert.ok(ours[0].includes('pip install "torch-memlint[server]"'));
    await extension.deactivate();
  });

test('a server that exits at once: its stderr in the error, and no restarts',
  { skip: installed(), timeout: 60000 }, async (t) => {
    const folder = scratch(t);
    const starts = path.join(folder, 'starts');
    const script = path.join(folder, 'fake-memlint.js');
    fs.writeFileSync(script, `require('fs').appendFileSync(${JSON.stringify(starts)}, 'x');
console.error('memlint server: needs pygls');
process.exit(2);
`);
    const caught = unhandledRejections(t);
    const { extension, seen } = await activate({ path: [process.execPath, script] });
    await new Promise((resolve) => setTimeout(resolve, 1000)); // a restart would come by now
    // vscode-languageclient 9.0.1 leaves two rejections unhandled when the
    // server exits during `initialize`: its start promise (which start() no
    // longer returns) and its own stop(). Anything else is ours.
    for (const error of caught) {
      assert.match(String(error && error.message), /^(Pending response rejected since connection got disposed|Client is not running and can't be stopped)/);
    }
    const ours = seen.errors.filter((m) => m.startsWith('memlint:'));
    assert.equal(ours.length, 1, seen.errors.join('\n'));
    assert.match(ours[0], /\(memlint server: needs pygls\)/);
    assert.equal(fs.readFileSync(starts, 'utf8'), 'x', 'the server was started again');
    assert.ok(!seen.errors.some((m) => /crashed/.test(m)), seen.errors.join('\n'));
    await extension.deactivate();
  });
