// memlint for VS Code: starts `memlint server` (the language server in the
// torch-memlint Python package) over stdio for Python files and shows its
// diagnostics, quick fixes and `source.fixAll.memlint`. Plain CommonJS, no
// build step.
'use strict';

const os = require('os');
const path = require('path');
const vscode = require('vscode');
const { CloseAction, ErrorAction, LanguageClient } = require('vscode-languageclient/node');

const INSTALL = 'pip install "torch-memlint[server]"';
const DEFAULT_PATH = ['memlint'];
// The server checks files whose path ends in .py or .pyi; an untitled buffer
// is sent too, and gets diagnostics once it is saved as such a file.
const DOCUMENT_SELECTOR = [
  { scheme: 'file', language: 'python' },
  { scheme: 'untitled', language: 'python' },
];

let client; // the LanguageClient of the current server, if it started
let output; // one output channel for every server this window starts
let queue = Promise.resolve(); // starts and stops, one at a time

function expand(value, folder) {
  let result = folder === undefined ? value : value.split('${workspaceFolder}').join(folder);
  if (result === '~' || result.startsWith('~/') || result.startsWith('~\\')) {
    result = path.join(os.homedir(), result.slice(1));
  }
  return result;
}

/**
 * The program and arguments that start the server, from the `memlint.*`
 * settings: `<interpreter> -m memlint server` if `memlint.interpreter` is
 * set, else `memlint.path` (a list, or one string) followed by `server`.
 */
function serverCommand(config, folder) {
  const interpreter = String(config.get('interpreter') || '').trim();
  if (interpreter) {
    return { command: expand(interpreter, folder), args: ['-m', 'memlint', 'server'] };
  }
  let argv = config.get('path');
  if (typeof argv === 'string') {
    argv = [argv];
  }
  if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === 'string')
      || !argv[0].trim()) {
    argv = DEFAULT_PATH;
  }
  argv = argv.map((a) => expand(a, folder));
  return { command: argv[0], args: [...argv.slice(1), 'server'] };
}

function commandLine(command, args) {
  return [command, ...args].map((a) => (/[\s"']/.test(a) ? JSON.stringify(a) : a)).join(' ');
}

function reason(error) {
  const text = error instanceof Error ? error.message : String(error);
  if (/ENOENT/.test(text)) {
    return 'command not found';
  }
  if (/EACCES/.test(text)) {
    return 'not executable';
  }
  return text;
}

function showStartError(shown, why) {
  const message = `memlint: could not start the language server with \`${shown}\` `
    + `(${why}). Install it where that command runs: ${INSTALL}; `
    + 'or set memlint.path (the memlint command) or memlint.interpreter '
    + '(a Python that has it).';
  output.appendLine(message);
  // Not awaited: the restart queue must not wait for a click.
  void Promise.resolve(vscode.window.showErrorMessage(message, 'Open Settings', 'Show Output'))
    .then((choice) => {
      if (choice === 'Open Settings') {
        return vscode.commands.executeCommand('workbench.action.openSettings', 'memlint');
      }
      if (choice === 'Show Output') {
        output.show(true);
      }
      return undefined;
    });
}

/** The output channel as the client gets it: the server's stderr is kept too. */
function recordingChannel() {
  const channel = {
    stderr: '',
    name: output.name,
    append(value) {
      channel.stderr = (channel.stderr + value).slice(-4000);
      output.append(value);
    },
    appendLine: (value) => output.appendLine(value),
    replace: (value) => output.replace(value),
    clear: () => output.clear(),
    show: (...args) => output.show(...args),
    hide: () => output.hide(),
    dispose: () => {}, // shared by every client of this window
  };
  return channel;
}

async function start() {
  const config = vscode.workspace.getConfiguration('memlint');
  const folders = vscode.workspace.workspaceFolders;
  const folder = folders && folders.length > 0 ? folders[0].uri.fsPath : undefined;
  const { command, args } = serverCommand(config, folder);
  const shown = commandLine(command, args);
  // No `transport`: TransportKind.stdio would append `--stdio` to the
  // arguments, which `memlint server` does not take; stdio is the default.
  const serverOptions = { command, args, options: folder === undefined ? {} : { cwd: folder } };
  const channel = recordingChannel();
  let running = false;
  let fallback; // the library's own handler, once the server has started
  const clientOptions = {
    documentSelector: DOCUMENT_SELECTOR,
    outputChannel: channel,
    // A server that dies before it answers `initialize` (memlint missing,
    // no pygls) is not restarted five times over; the error below says why.
    errorHandler: {
      error: (error, message, count) => (running ? fallback.error(error, message, count)
        : { action: ErrorAction.Continue, handled: true }),
      closed: () => (running ? fallback.closed()
        : { action: CloseAction.DoNotRestart, handled: true }),
    },
    initializationFailedHandler: (error) => {
      output.appendLine(`memlint: initialize failed: ${reason(error)}`);
      return false;
    },
  };
  const candidate = new LanguageClient('memlint', 'memlint', serverOptions, clientOptions);
  fallback = candidate.createDefaultErrorHandler();
  output.appendLine(`memlint: starting ${shown}`);
  let failure;
  try {
    await candidate.start();
  } catch (error) {
    failure = error;
  }
  // start() can resolve although the server exited during it (the client's
  // close handler clears the promise start() then returns): ask the state.
  if (failure === undefined && candidate.isRunning()) {
    running = true;
    client = candidate;
    return;
  }
  const said = channel.stderr.split(/\r?\n/).map((line) => line.trim()).filter(Boolean).pop();
  showStartError(shown, said || (failure === undefined ? 'it exited' : reason(failure)));
}

async function stop() {
  const old = client;
  client = undefined;
  if (old === undefined || !old.needsStop()) {
    return;
  }
  try {
    await old.stop();
  } catch (error) {
    output.appendLine(`memlint: stopping the server: ${reason(error)}`);
  }
}

function restart() {
  queue = queue.then(stop).then(start);
  return queue;
}

function activate(context) {
  output = vscode.window.createOutputChannel('memlint');
  context.subscriptions.push(
    output,
    vscode.commands.registerCommand('memlint.restart', restart),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration('memlint')) {
        void restart();
      }
    }),
  );
  return restart();
}

function deactivate() {
  queue = queue.then(stop);
  return queue;
}

module.exports = { activate, deactivate, serverCommand, DOCUMENT_SELECTOR };
