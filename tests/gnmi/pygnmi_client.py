#!/usr/bin/python3
"""A gNMI client for lq's tests (issue 40): pygnmi, the independent judge of lqd's gNMI
northbound. Prints JSON on stdout; on a gRPC error prints {"error": CODE, "details": ...}
and exits 3.

  pygnmi_client.py --target HOST:PORT (--ca CA [--cert C --key K] [--override NAME] |
                    --insecure) CMD ...

--insecure: plaintext gRPC (lqd serves it only on a loopback address).

CMD:
  caps                        Capabilities.
  get PATH...                 Get (JSON_IETF).
  once PATH                   Subscribe ONCE: every response up to sync_response.
  poll PATH N                 Subscribe POLL: the initial sync and N polls.
  stream PATH MODE MS SECS    Subscribe STREAM (MODE sample or on_change, MS the sample
                              interval): one line per response for SECS seconds, each
                              with its receive time ("rx_unix_ns").
  nocert PATH                 Get over TLS without a client certificate (raw grpc with
                              pygnmi's own gNMI stubs: pygnmi always presents one).
  load N PATH MS SECS         N clients (N connections), each a STREAM SAMPLE subscription
                              every MS ms, for SECS seconds once all are subscribed: prints
                              the updates received per client ("ready" on stderr first).
"""

import argparse
import json
import os
import sys
import time

import grpc
from pygnmi.client import gNMIclient, gNMIException


def fail(code, details):
    print(json.dumps({"error": code, "details": details}))
    sys.exit(3)


def rpc_error(e):
    """The gRPC status code of an exception raised by pygnmi or grpc, if it has one."""
    for x in (e, getattr(e, "orig_exc", None), getattr(e, "__cause__", None)):
        if isinstance(x, grpc.RpcError) and hasattr(x, "code"):
            return x.code().name, x.details()
    return None


def client(a, host, port):
    """A connected pygnmi client: TLS with the CA (and the identity, if any), or plaintext
    with --insecure."""
    if a.insecure:
        gc = gNMIclient(target=(host, port), insecure=True, gnmi_timeout=a.timeout)
    else:
        gc = gNMIclient(
            target=(host, port),
            path_root=a.ca,
            path_cert=a.cert,
            path_key=a.key,
            override=a.override,
            gnmi_timeout=a.timeout,
        )
    gc.connect()
    return gc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--ca")
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--override")
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("cmd")
    ap.add_argument("args", nargs="*")
    a = ap.parse_args()
    host, port = a.target.rsplit(":", 1)

    if a.cmd == "nocert":
        from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc
        from pygnmi.create_gnmi_path import gnmi_path_generator

        creds = grpc.ssl_channel_credentials(root_certificates=open(a.ca, "rb").read())
        opts = [("grpc.ssl_target_name_override", a.override)] if a.override else []
        ch = grpc.secure_channel(a.target, creds, options=opts)
        stub = gnmi_pb2_grpc.gNMIStub(ch)
        try:
            r = stub.Get(
                gnmi_pb2.GetRequest(path=[gnmi_path_generator(a.args[0])], encoding=4),
                timeout=a.timeout,
            )
        except grpc.RpcError as e:
            fail(e.code().name, e.details())
        print(json.dumps({"notifications": len(r.notification)}))
        return

    if a.cmd == "load":
        load(a, host, int(port))
        return

    try:
        gc = client(a, host, int(port))
    except grpc.FutureTimeoutError:
        fail("UNAVAILABLE", "no gNMI connection within the timeout (TLS handshake refused?)")
    except Exception as e:  # pygnmi wraps the gRPC error of its Capabilities call
        r = rpc_error(e)
        if r:
            fail(*r)
        fail("CLIENT", repr(e))

    try:
        if a.cmd == "caps":
            print(json.dumps(gc.capabilities()))
        elif a.cmd == "get":
            print(json.dumps(gc.get(path=a.args, encoding="json_ietf")))
        elif a.cmd == "once":
            sub = gc.subscribe2(
                subscribe={
                    "subscription": [{"path": a.args[0]}],
                    "mode": "once",
                    "encoding": "json_ietf",
                }
            )
            out = []
            deadline = time.time() + a.timeout
            while time.time() < deadline:
                try:
                    m = sub.get_update(timeout=max(0.1, deadline - time.time()))
                except TimeoutError:
                    break
                out.append(m)
                if "sync_response" in m:
                    break
            if sub.error is not None:
                r = rpc_error(sub.error)
                fail(*(r or ("CLIENT", repr(sub.error))))
            print(json.dumps(out))
        elif a.cmd == "poll":
            sub = gc.subscribe2(
                subscribe={
                    "subscription": [{"path": a.args[0]}],
                    "mode": "poll",
                    "encoding": "json_ietf",
                }
            )
            out = [sub.get_update(timeout=a.timeout) for _ in range(int(a.args[1]) + 1)]
            sub.close()
            print(json.dumps(out))
        elif a.cmd == "stream":
            path, mode, ms, secs = a.args[0], a.args[1], int(a.args[2]), float(a.args[3])
            s = {"path": path, "mode": mode}
            if mode == "sample":
                s["sample_interval"] = ms * 1_000_000
            sub = gc.subscribe2(
                subscribe={"subscription": [s], "mode": "stream", "encoding": "json_ietf"}
            )
            deadline = time.time() + secs
            while time.time() < deadline:
                try:
                    # Short waits: an error ending the stream is seen within 0.2 s.
                    m = sub.get_update(timeout=min(0.2, max(0.05, deadline - time.time())))
                except TimeoutError:
                    if sub.error is not None:
                        break
                    continue
                m["rx_unix_ns"] = time.time_ns()
                m["rx_mono_ns"] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                print(json.dumps(m), flush=True)
            if sub.error is not None:
                r = rpc_error(sub.error)
                fail(*(r or ("CLIENT", repr(sub.error))))
            sub.close()
        else:
            fail("CLIENT", f"unknown command {a.cmd}")
    except gNMIException as e:
        r = rpc_error(e)
        fail(*(r or ("CLIENT", repr(e))))
    finally:
        gc.close()


def load(a, host, port):
    n, path, ms, secs = int(a.args[0]), a.args[1], int(a.args[2]), float(a.args[3])
    clients, subs = [], []
    for _ in range(n):
        gc = client(a, host, port)
        clients.append(gc)
        subs.append(
            gc.subscribe2(
                subscribe={
                    "subscription": [
                        {"path": path, "mode": "sample", "sample_interval": ms * 1_000_000}
                    ],
                    "mode": "stream",
                    "encoding": "json_ietf",
                }
            )
        )
    # Each subscription's initial values first, then the window.
    for sub in subs:
        sub.get_update(timeout=a.timeout)
    for sub in subs:
        while sub.peek():
            sub.get_update(timeout=a.timeout)
    print("ready", file=sys.stderr, flush=True)
    counts = [0] * n
    deadline = time.time() + secs
    while time.time() < deadline:
        idle = True
        for i, sub in enumerate(subs):
            while sub.peek():
                sub.get_update(timeout=a.timeout)
                counts[i] += 1
                idle = False
        if idle:
            time.sleep(0.005)
    errors = [repr(s.error) for s in subs if s.error is not None]
    print(json.dumps({"clients": n, "updates": counts, "errors": errors}), flush=True)
    # Closing 100 subscriptions one by one takes pygnmi a second each (it joins each
    # subscription's thread): the process ends here and the kernel closes the connections.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
