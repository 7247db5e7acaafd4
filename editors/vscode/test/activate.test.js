// extension.js with stand-ins for `vscode` and `vscode-languageclient/node`
// (both need a running VS Code): which server command each setting gives,
// the document selector, restarts, the start-failure message, deactivate.
// Run: npm test (node --test)
'use strict';

const assert = require('node:assert/strict');
const Module = require('node:module');
const path = require('node:path');
const { test } = require('node:test');

const EXTENSION = path.join(__dirname, '..', 'extension.js');
const MANIFEST = require('../package.json');
const DEFAULTS = Object.fromEntries(
  Object.entries(MANIFEST.contributes.configuration.properties)
    .map(([key, spec]) => [key.replace(/^memlint\./, ''), spec.default]),
);

let fake; // this test's stand-ins and what the extension did with them

class FakeLanguageClient {
  constructor(id, name, serverOptions, clientOptions) {
    Object.assign(this, { id, name, serverOptions, clientOptions, state: 'initial', stops: 0 });
    fake.clients.push(this);
  }

  createDefaultErrorHandler() {
    return { error: () => ({ action: 'continue' }), closed: () => ({ action: 'restart' }) };
  }

  async start() {
    this.state = 'starting';
    await new Promise((resolve) => setImmediate(resolve));
    if (fake.startError !== undefined) {
      this.state = 'startFailed';
      throw fake.startError;
    }
    this.state = fake.exitsWhileStarting ? 'startFailed' : 'running';
  }

  isRunning() {
    return this.state === 'running';
  }

  needsStop() {
    return this.state === 'starting' || this.state === 'running';
  }

  async stop() {
    if (this.state !== 'running') {
      throw new Error(`Client is not running and can't be stopped (${this.state})`);
    }
    this.stops += 1;
    this.state = 'stopped';
  }
}

function fakeVscode(settings, folders) {
  return {
    workspace: {
      workspaceFolders: folders === undefined ? undefined
        : folders.map((fsPath) => ({ uri: { fsPath } })),
      getConfiguration(section) {
        assert.equal(section, 'memlint');
        // As VS Code does: the user's value, else the default package.json declares.
        return { get: (key) => (key in settings ? settings[key] : DEFAULTS[key]) };
      },
      onDidChangeConfiguration(listener) {
        fake.configListeners.push(listener);
        return { dispose() {} };
      },
    },
    window: {
      createOutputChannel(name) {
        return { name, lines: [], appendLine(line) { this.lines.push(line); }, append() {},
                 show() { fake.outputShown = true; }, dispose() {} };
      },
      showErrorMessage(message, ...items) {
        fake.errors.push({ message, items });
        return Promise.resolve(undefined);
      },
    },
    commands: {
      registerCommand(id, handler) {
        fake.commands.set(id, handler);
        return { dispose() {} };
      },
      executeCommand() { return Promise.resolve(); },
    },
  };
}

const load = Module._load;
Module._load = function loadWithStandIns(request, parent, isMain) {
  if (request === 'vscode') {
    return fake.vscode;
  }
  if (request === 'vscode-languageclient/node') {
    return { LanguageClient: FakeLanguageClient, ErrorAction: { Continue: 1, Shutdown: 2 },
             CloseAction: { DoNotRestart: 1, Restart: 2 } };
  }
  return load.call(this, request, parent, isMain);
};

/** A fresh copy of extension.js, activated with `settings`. */
async function activate(settings = {}, { folders, startError, exitsWhileStarting } = {}) {
  fake = { settings, startError, exitsWhileStarting, clients: [], configListeners: [],
           commands: new Map(), errors: [] };
  fake.vscode = fakeVscode(settings, folders);
  delete require.cache[require.resolve(EXTENSION)];
  const extension = require(EXTENSION);
  const context = { subscriptions: [] };
  await extension.activate(context);
  return { extension, context };
}

test('by default the server is `memlint server`, over stdio', async () => {
  await activate();
  assert.equal(fake.clients.length, 1);
  const [client] = fake.clients;
  assert.equal(client.id, 'memlint');
  assert.equal(client.serverOptions.command, 'memlint');
  assert.deepEqual(client.serverOptions.args, ['server']);
  // TransportKind.stdio would make the client append `--stdio`.
  assert.equal(client.serverOptions.transport, undefined);
  assert.equal(client.state, 'running');
  assert.deepEqual(fake.errors, []);
});

test('the document selector covers Python files and untitled Python buffers', async () => {
  await activate();
  const selector = fake.clients[0].clientOptions.documentSelector;
  assert.deepEqual(selector, [
    { scheme: 'file', language: 'python' },
    { scheme: 'untitled', language: 'python' },
  ]);
});

test('memlint.interpreter runs `<python> -m memlint server`', async () => {
  await activate({ interpreter: '/x/python' });
  assert.equal(fake.clients[0].serverOptions.command, '/x/python');
  assert.deepEqual(fake.clients[0].serverOptions.args, ['-m', 'memlint', 'server']);
});

test('memlint.interpreter wins over memlint.path', async () => {
  await activate({ interpreter: '/x/python', path: ['/opt/bin/memlint'] });
  assert.equal(fake.clients[0].serverOptions.command, '/x/python');
});

test('memlint.path names the program; `server` is appended', async () => {
  await activate({ path: ['/opt/bin/memlint'] });
  assert.equal(fake.clients[0].serverOptions.command, '/opt/bin/memlint');
  assert.deepEqual(fake.clients[0].serverOptions.args, ['server']);
});

test('memlint.path may carry arguments, or be one string', async () => {
  await activate({ path: ['uv', 'run', 'memlint'] });
  assert.equal(fake.clients[0].serverOptions.command, 'uv');
  assert.deepEqual(fake.clients[0].serverOptions.args, ['run', 'memlint', 'server']);
  await activate({ path: '/opt/bin/memlint' });
  assert.equal(fake.clients[0].serverOptions.command, '/opt/bin/memlint');
  assert.deepEqual(fake.clients[0].serverOptions.args, ['server']);
});

test('an empty memlint.path falls back to `memlint`', async () => {
  await activate({ path: [] });
  assert.equal(fake.clients[0].serverOptions.command, 'memlint');
  await activate({ path: [''], interpreter: '  ' });
  assert.equal(fake.clients[0].serverOptions.command, 'memlint');
  assert.deepEqual(fake.clients[0].serverOptions.args, ['server']);
});

test('${workspaceFolder} is expanded, and the server runs in that folder', async () => {
  await activate({ interpreter: '${workspaceFolder}/.venv/bin/python' },
                 { folders: ['/work/proj'] });
  const { serverOptions } = fake.clients[0];
  assert.equal(serverOptions.command, '/work/proj/.venv/bin/python');
  assert.equal(serverOptions.options.cwd, '/work/proj');
});

test('deactivate() stops the client', async () => {
  const { extension } = await activate();
  const [client] = fake.clients;
  await extension.deactivate();
  assert.equal(client.stops, 1);
  assert.equal(client.state, 'stopped');
  await extension.deactivate(); // nothing left to stop
  assert.equal(client.stops, 1);
});

test('a memlint.* setting change restarts the server with the new command', async () => {
  const { extension } = await activate();
  const [first] = fake.clients;
  fake.settings.path = ['/opt/bin/memlint'];
  fake.configListeners.forEach((listener) => listener({ affectsConfiguration: (s) => s === 'memlint' }));
  await extension.deactivate(); // waits for the restart queued before it
  assert.equal(fake.clients.length, 2);
  assert.equal(first.stops, 1);
  assert.equal(fake.clients[1].serverOptions.command, '/opt/bin/memlint');
  assert.equal(fake.clients[1].stops, 1);
});

test('another extension\'s setting change does not restart', async () => {
  const { extension } = await activate();
  fake.configListeners.forEach((listener) => listener({ affectsConfiguration: (s) => s === 'python' }));
  await extension.deactivate();
  assert.equal(fake.clients.length, 1);
});

test('the memlint.restart command restarts the server', async () => {
  const { context } = await activate();
  assert.ok(fake.commands.has('memlint.restart'));
  assert.ok(MANIFEST.contributes.commands.some((c) => c.command === 'memlint.restart'));
  await fake.commands.get('memlint.restart')();
  assert.equal(fake.clients.length, 2);
  assert.equal(fake.clients[0].state, 'stopped');
  assert.equal(fake.clients[1].state, 'running');
  assert.ok(context.subscriptions.length >= 3);
});

test('a server that cannot start: one error naming the command and the fix', async () => {
  const startError = 'Launching server using command /opt/bin/memlint failed. '
    + 'Error: spawn /opt/bin/memlint ENOENT'; // what vscode-languageclient 9 rejects with
  const { extension } = await activate({ path: ['/opt/bin/memlint'] }, { startError });
  assert.equal(fake.errors.length, 1);
  const { message, items } = fake.errors[0];
  assert.match(message, /`\/opt\/bin\/memlint server`/);
  assert.match(message, /command not found/);
  assert.ok(message.includes('pip install "torch-memlint[server]"'), message);
  assert.match(message, /memlint\.path/);
  assert.match(message, /memlint\.interpreter/);
  assert.deepEqual(items, ['Open Settings', 'Show Output']);
  await extension.deactivate(); // the failed client is not stopped again
  assert.equal(fake.clients[0].stops, 0);
});

test('start() resolving on a server that exited is a failure too', async () => {
  // vscode-languageclient 9.0.1 does this when the server exits during initialize.
  const { extension } = await activate({}, { exitsWhileStarting: true });
  assert.equal(fake.errors.length, 1);
  assert.match(fake.errors[0].message, /`memlint server` \(it exited\)/);
  await extension.deactivate();
  assert.equal(fake.clients[0].stops, 0);
});

test('before the server runs, a closed connection is not restarted', async () => {
  await activate({}, { exitsWhileStarting: true });
  const { errorHandler } = fake.clients[0].clientOptions;
  assert.deepEqual(errorHandler.closed(), { action: 1, handled: true }); // DoNotRestart
  await activate();
  assert.deepEqual(fake.clients[0].clientOptions.errorHandler.closed(), { action: 'restart' });
});

test('package.json: entry point, activation, settings, engine of the client library', () => {
  assert.equal(MANIFEST.name, 'memlint');
  assert.equal(path.resolve(__dirname, '..', MANIFEST.main), EXTENSION);
  assert.ok(MANIFEST.activationEvents.includes('onLanguage:python'));
  assert.deepEqual(DEFAULTS.path, ['memlint']);
  assert.equal(DEFAULTS.interpreter, '');
  let library;
  try {
    library = require('vscode-languageclient/package.json');
  } catch {
    return; // before `npm install`
  }
  // vsce refuses an engines.vscode older than the client library's.
  assert.equal(MANIFEST.engines.vscode, library.engines.vscode);
});
