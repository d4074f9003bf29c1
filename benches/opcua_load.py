#!/usr/bin/env python3
"""The OPC UA load of `opcua_compare` (benches/src/bin/opcua_compare/; BENCHMARKS.md §9).

`serve`: an asyncua server on 127.0.0.1 with N Double nodes ns=2;s=v0000.. that all
change every --period-ms (each write a new value, its source and server timestamps now),
for at most --seconds; it prints one JSON line `ready` when it serves, and `done` with
the writes it made when it stops (stdin closed, or the bound).

`client`: a plain asyncua client with ONE subscription (publishing interval
--publishing-ms) of N monitored items on those nodes; it counts the value changes it
receives during --seconds after --warmup seconds and prints them as one JSON line.
"""

import argparse
import asyncio
import datetime
import json
import logging
import sys
import time

from asyncua import Client, Server, ua

NAMESPACE = "urn:grid:bench:opcua"


def node_name(n):
    return f"v{n:04}"


async def serve(args):
    server = Server()
    await server.init()
    server.set_endpoint(f"opc.tcp://127.0.0.1:{args.port}/grid/")
    server.set_server_name("Grid benchmark load")
    server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
    # One subscription per Grid tag, and the plain client's: more than asyncua's default.
    server.iserver.max_subscriptions = args.nodes + 100
    namespace = await server.register_namespace(NAMESPACE)
    folder = await server.nodes.objects.add_folder(namespace, "Load")
    nodes = []
    for n in range(args.nodes):
        name = node_name(n)
        node = await folder.add_variable(ua.NodeId(name, namespace), name, ua.Variant(0.0, ua.VariantType.Double))
        nodes.append(node.nodeid)
    writes = 0
    late = 0
    async with server:
        print(json.dumps({"ready": True, "port": args.port, "namespace": namespace}), flush=True)
        loop = asyncio.get_running_loop()
        stdin_closed = loop.run_in_executor(None, sys.stdin.read)
        deadline = time.monotonic() + args.seconds
        period = args.period_ms / 1000.0
        tick = time.monotonic()
        value = 0.0
        while time.monotonic() < deadline and not stdin_closed.done():
            value += 1.0
            for nodeid in nodes:
                now = datetime.datetime.now(datetime.timezone.utc)
                await server.write_attribute_value(
                    nodeid,
                    ua.DataValue(
                        ua.Variant(value, ua.VariantType.Double),
                        SourceTimestamp=now,
                        ServerTimestamp=now,
                    ),
                )
                writes += 1
            tick += period
            pause = tick - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            else:
                late += 1
                tick = time.monotonic()
                await asyncio.sleep(0)
    print(json.dumps({"done": True, "writes": writes, "late_periods": late}), flush=True)


class Counter:
    def __init__(self):
        self.changes = 0

    def datachange_notification(self, node, val, data):
        self.changes += 1


async def client(args):
    url = f"opc.tcp://127.0.0.1:{args.port}/grid/"
    async with Client(url=url, timeout=30) as c:
        namespace = await c.get_namespace_index(NAMESPACE)
        counter = Counter()
        sub = await c.create_subscription(args.publishing_ms, counter)
        nodes = [c.get_node(ua.NodeId(node_name(n), namespace)) for n in range(args.nodes)]
        await sub.subscribe_data_change(nodes, queuesize=64)
        await asyncio.sleep(args.warmup)
        before, start = counter.changes, time.monotonic()
        await asyncio.sleep(args.seconds)
        changes, seconds = counter.changes - before, time.monotonic() - start
        await sub.delete()
    print(json.dumps({"changes": changes, "seconds": seconds}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["serve", "client"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--period-ms", type=float, default=1000.0, help="serve: every node changes this often")
    parser.add_argument("--publishing-ms", type=float, default=1000.0, help="client: the subscription's interval")
    parser.add_argument("--seconds", type=float, required=True, help="serve: the longest it serves; client: its window")
    parser.add_argument("--warmup", type=float, default=2.0, help="client: seconds not counted")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    asyncio.run(serve(args) if args.mode == "serve" else client(args))


if __name__ == "__main__":
    main()
