#!/usr/bin/env python3
"""A real Modbus TCP device (server) on loopback for Grid's tests and journeys.

pymodbus serves the protocol and holds the registers; this script adds only what a test
drives through the peers' control protocol (adapters/peers/README.md): one JSON request
per line on stdin, one JSON answer per line on stdout. Injected faults are real Modbus:
`fail` answers exception responses on the wire, `silence` sends no response at all.
"""

import argparse
import asyncio
import json
import struct
import sys

from pymodbus.constants import ExcCodes
from pymodbus.exceptions import NoSuchIdException
from pymodbus.server import ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice

ADDRESSES = 65536

# The read function code of each register kind (pymodbus keys its blocks by them).
FUNCTION = {"coil": 1, "discrete": 2, "holding": 3, "input": 4}

EXCEPTION = {
    "illegal-function": ExcCodes.ILLEGAL_FUNCTION,
    "illegal-address": ExcCodes.ILLEGAL_ADDRESS,
    "illegal-value": ExcCodes.ILLEGAL_VALUE,
    "device-failure": ExcCodes.DEVICE_FAILURE,
    "busy": ExcCodes.DEVICE_BUSY,
}

# The two registers of a 32-bit value, high word first (word order `big`).
PACKING = {"set-f32": ">f", "set-u32": ">I", "set-i32": ">i"}


def unit_device(unit):
    """Every register kind of one unit, addresses 0..65535, all zero."""
    bits = SimData(address=0, values=[False] * ADDRESSES, datatype=DataType.BITS)
    words = SimData(address=0, count=ADDRESSES, values=0, datatype=DataType.REGISTERS)
    return SimDevice(id=unit, simdata=([bits], [bits], [words], [words]))


class Faulty:
    """The server's datastore (pymodbus' own) behind the faults a test injects."""

    def __init__(self, store, units):
        self.store = store
        self.units = units
        self.failures = {}  # (unit, function code, address) -> exception code
        self.silent = set()
        self.reads = 0

    def device_ids(self):
        return self.store.device_ids()

    async def async_getValues(self, device_id, func_code, address, count=1):
        self.reads += 1
        if device_id in self.silent:
            # The server is started with ignore_missing_devices: no response at all.
            raise NoSuchIdException(f"unit {device_id} is silenced")
        if device_id not in self.units:
            return ExcCodes.GATEWAY_NO_RESPONSE
        for (unit, function, failing), code in self.failures.items():
            if (unit, function) == (device_id, func_code) and address <= failing < address + count:
                return code
        return await self.store.async_getValues(device_id, func_code, address, count)

    async def async_setValues(self, device_id, func_code, address, values):
        return await self.store.async_setValues(device_id, func_code, address, values)


def words_of(request):
    """The registers a `set-*32` request writes, in its word order."""
    high, low = struct.unpack(">HH", struct.pack(PACKING[request["op"]], request["value"]))
    order = request.get("word-order", "big")
    if order not in ("big", "little"):
        raise ValueError(f"word-order {order!r} is neither big nor little")
    return [high, low] if order == "big" else [low, high]


class Peer:
    def __init__(self):
        self.device = None
        self.connections = 0
        self.open = 0

    def serve(self, server, units):
        """Put the faults in front of the datastore pymodbus built from the devices."""
        self.device = Faulty(server.context, units)
        server.context = self.device

    def traced(self, connected):
        self.connections += 1 if connected else 0
        self.open += 1 if connected else -1

    async def answer(self, request):
        op = request.get("op")
        if op in ("set", *PACKING):
            unit, register, address = request["unit"], request["register"], request["address"]
            if op == "set":
                values = request["values"] if "values" in request else [request["value"]]
            else:
                values = words_of(request)
            if register in ("coil", "discrete"):
                if any(v not in (0, 1) for v in values):
                    raise ValueError("bits are 0 or 1")
                values = [bool(v) for v in values]
            elif any(not 0 <= v <= 0xFFFF for v in values):
                raise ValueError("words are 0..65535")
            if unit not in self.device.units or not 0 <= address <= ADDRESSES - len(values):
                raise ValueError(f"no unit {unit} or address {address} here")
            result = await self.device.store.async_setValues(
                unit, FUNCTION[register], address, values
            )
            if result is not None:
                raise ValueError(f"the datastore refused: {result!r}")
            return {}
        if op == "fail":
            key = (request["unit"], FUNCTION[request["register"]], request["address"])
            self.device.failures[key] = EXCEPTION[request["exception"]]
            return {}
        if op == "silence":
            self.device.silent.add(request["unit"])
            return {}
        if op == "heal":
            self.device.failures.clear()
            self.device.silent.clear()
            return {}
        if op == "stats":
            return {"reads": self.device.reads, "connections": self.connections, "open": self.open}
        raise ValueError(f"unknown op {op!r}")


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--units", default="1", help="comma-separated unit ids")
    args = parser.parse_args()
    units = [int(u) for u in args.units.split(",")]

    peer = Peer()
    server = ModbusTcpServer(
        [unit_device(u) for u in units],
        address=("127.0.0.1", args.port),
        ignore_missing_devices=True,
        trace_connect=peer.traced,
    )
    peer.serve(server, units)
    await server.serve_forever(background=True)
    port = server.transport.sockets[0].getsockname()[1]
    print(json.dumps({"ready": True, "port": port}), flush=True)

    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if request.get("op") == "stop":
                print(json.dumps({"ok": True}), flush=True)
                break
            answer = {"ok": True, **await peer.answer(request)}
        except (ValueError, KeyError, TypeError, struct.error) as error:
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), flush=True)
    await server.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
