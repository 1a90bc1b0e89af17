#!/usr/bin/python3
"""A real gRPC C-core xDS client (Debian's python3-grpcio) for xds-relay's
integration tests.

It makes generic unary calls (no serializers: raw bytes) to an xds:/// target
until one succeeds or the timeout expires, then prints the x-backend response
header of the backend that answered as "x-backend=<id>" and exits 0. On
failure it prints the last error to stderr and exits 1.

The xDS bootstrap comes from the GRPC_XDS_BOOTSTRAP file (or
GRPC_XDS_BOOTSTRAP_CONFIG inline JSON); xdstp:// names need
GRPC_EXPERIMENTAL_XDS_FEDERATION=true in grpcio 1.51.
"""

import argparse
import os
import sys
import time

import grpc


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="e.g. xds:///my-service")
    parser.add_argument("--method", default="/xdsrelay.test.Echo/Call")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to keep trying")
    parser.add_argument("--want-backend", default="",
                        help="keep calling until this backend answers")
    args = parser.parse_args()

    if not os.environ.get("GRPC_XDS_BOOTSTRAP") and not os.environ.get(
            "GRPC_XDS_BOOTSTRAP_CONFIG"):
        print("client.py: GRPC_XDS_BOOTSTRAP is not set", file=sys.stderr)
        return 1

    deadline = time.monotonic() + args.timeout
    last_err = None
    attempts = 0
    with grpc.insecure_channel(args.target) as channel:
        call = channel.unary_unary(args.method)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            attempts += 1
            try:
                _, rpc = call.with_call(b"", timeout=min(remaining, 5.0),
                                        wait_for_ready=True)
                md = dict(rpc.initial_metadata() or ())
                backend = md.get("x-backend", "")
                if not args.want_backend or backend == args.want_backend:
                    print("x-backend=%s" % backend, flush=True)
                    return 0
                last_err = "answered by backend %r, want %r" % (
                    backend, args.want_backend)
            except grpc.RpcError as err:
                last_err = "%s: %s" % (err.code(), err.details())
            time.sleep(0.2)  # pacing between attempts, not synchronisation
    print("client.py: no successful RPC to %s after %d attempts in %.0fs; "
          "last error: %s" % (args.target, attempts, args.timeout, last_err),
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
