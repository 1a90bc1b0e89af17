#!/usr/bin/env node
// A real @grpc/grpc-js-xds client for xds-relay's integration tests.
//
// It makes generic unary calls (identity serializers on Buffers) to an
// xds:/// target until one succeeds or the timeout expires, then prints the
// x-backend response header of the backend that answered as
// "x-backend=<id>" and exits 0. On failure it prints the last error to stderr
// and exits 1.
//
// The xDS bootstrap comes from the GRPC_XDS_BOOTSTRAP file or the
// GRPC_XDS_BOOTSTRAP_CONFIG inline JSON (read by grpc-js-xds).
//
// Usage: node client.js --target xds:///NAME [--method /pkg.Svc/Method]
//        [--timeout SECONDS] [--want-backend ID]
'use strict';

const grpc = require('@grpc/grpc-js');
const grpcXds = require('@grpc/grpc-js-xds');

function parseArgs(argv) {
  const args = {target: '', method: '/xdsrelay.test.Echo/Call', timeout: 30, wantBackend: ''};
  for (let i = 0; i < argv.length; i++) {
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`missing value for ${argv[i]}`);
      return argv[++i];
    };
    switch (argv[i]) {
      case '--target': args.target = next(); break;
      case '--method': args.method = next(); break;
      case '--timeout': args.timeout = Number(next()); break;
      case '--want-backend': args.wantBackend = next(); break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  if (!args.target) throw new Error('--target is required');
  if (!(args.timeout > 0)) throw new Error('--timeout must be a positive number of seconds');
  return args;
}

const identity = (b) => b;

// callOnce makes one unary call and resolves with the x-backend header.
function callOnce(client, method, deadline) {
  return new Promise((resolve, reject) => {
    let backend = '';
    const call = client.makeUnaryRequest(
        method, identity, identity, Buffer.alloc(0),
        new grpc.Metadata({waitForReady: true}), {deadline},
        (err) => (err ? reject(err) : resolve(backend)));
    call.on('metadata', (md) => {
      const v = md.get('x-backend');
      if (v.length > 0) backend = String(v[0]);
    });
  });
}

async function main() {
  let args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(`client.js: ${e.message}`);
    return 2;
  }
  if (!process.env.GRPC_XDS_BOOTSTRAP && !process.env.GRPC_XDS_BOOTSTRAP_CONFIG) {
    console.error('client.js: neither GRPC_XDS_BOOTSTRAP nor GRPC_XDS_BOOTSTRAP_CONFIG is set');
    return 1;
  }
  // grpc-js-xds reports a bad bootstrap only as "Cannot read properties of
  // null" on every call; load it once here to print the real error.
  let bootstrap = null;
  try {
    bootstrap = require('@grpc/grpc-js-xds/build/src/xds-bootstrap');
  } catch (e) {
    // Internal module moved: skip the early check.
  }
  if (bootstrap !== null) {
    try {
      bootstrap.loadBootstrapInfo();
    } catch (e) {
      console.error(`client.js: ${e.message}`);
      return 1;
    }
  }
  grpcXds.register();
  const client = new grpc.Client(args.target, grpc.credentials.createInsecure());
  const end = Date.now() + args.timeout * 1000;
  let lastErr = 'no attempt';
  let attempts = 0;
  try {
    while (Date.now() < end) {
      attempts++;
      const deadline = new Date(Math.min(end, Date.now() + 5000));
      try {
        const backend = await callOnce(client, args.method, deadline);
        if (!args.wantBackend || backend === args.wantBackend) {
          console.log(`x-backend=${backend}`);
          return 0;
        }
        lastErr = `answered by backend "${backend}", want "${args.wantBackend}"`;
      } catch (e) {
        lastErr = `${e.code !== undefined ? grpc.status[e.code] : ''} ${e.details || e.message}`;
      }
      // Pacing between attempts, not synchronisation.
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    client.close();
  }
  console.error(`client.js: no successful RPC to ${args.target} after ${attempts} attempts ` +
      `in ${args.timeout}s; last error: ${lastErr}`);
  return 1;
}

main().then((code) => process.exit(code), (e) => {
  console.error(`client.js: ${e.stack || e}`);
  process.exit(1);
});
