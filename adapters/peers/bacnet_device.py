#!/usr/bin/env python3
"""A real BACnet/IP device on loopback for Grid's tests and journeys.

bacpypes3 serves the protocol (ReadProperty, ReadPropertyMultiple, SubscribeCOV and its
cancellation, confirmed COV notifications) and holds the objects; this script adds only
what a test drives through the peers' control protocol (adapters/peers/README.md): one
JSON request per line on stdin, one JSON answer per line on stdout. What it changes is
real BACnet: a `set`, `flags` or `reliability` changes the object's properties, so
reads answer them and COV subscribers are sent a ConfirmedCOVNotification.
"""

import argparse
import asyncio
import json
import re
import sys
from functools import partial

from bacpypes3.app import Application
from bacpypes3.basetypes import Reliability
from bacpypes3.errors import UnrecognizedService
from bacpypes3.local.analog import AnalogInputObject
from bacpypes3.local.binary import BinaryInputObject

FLAGS = ("in-alarm", "fault", "overridden", "out-of-service")


def camel(name):
    """A BACnet name as the standard writes it (`over-range`) in bacpypes3's
    spelling (`overRange`)."""
    head, *rest = name.split("-")
    return head + "".join(part.capitalize() for part in rest)


def kebab(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


class Device(Application):
    """The application, counting what the tests ask about."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reads = 0
        self.notifications = 0
        self.acks = 0
        self.refusals = 0
        self.rejected = 0
        self.subscribe_requests = 0
        self.without_rpm = False

    async def do_ReadPropertyRequest(self, apdu):
        self.reads += 1
        return await super().do_ReadPropertyRequest(apdu)

    async def do_ReadPropertyMultipleRequest(self, apdu):
        if self.without_rpm:
            self.rejected += 1
            raise UnrecognizedService("this device has no ReadPropertyMultiple")
        self.reads += 1
        return await super().do_ReadPropertyMultipleRequest(apdu)

    async def do_SubscribeCOVRequest(self, apdu):
        self.subscribe_requests += 1
        return await super().do_SubscribeCOVRequest(apdu)

    def cov_notification(self, cov, apdu):
        self.notifications += 1
        confirmed = self.request(apdu)
        if confirmed:
            confirmed.add_done_callback(partial(self.counted_confirmation, cov))

    def counted_confirmation(self, cov, future):
        try:
            answer = future.result()
        except Exception as error:  # a timeout after the retries, an abort
            print(f"notification to {cov.client_addr} unanswered: {error!r}", file=sys.stderr)
            self.refusals += 1
            return
        if answer is None or type(answer).__name__ == "SimpleAckPDU":
            self.acks += 1
        else:
            self.refusals += 1

    def subscriptions(self):
        return sum(len(d.cov_subscriptions) for d in self._cov_detections.values())


def build(instance, port, analogs, without_rpm=False):
    namespace = argparse.Namespace(
        name=f"grid-test-{instance}",
        instance=instance,
        network=0,
        address=f"127.0.0.1/32:{port}",
        vendoridentifier=999,
        foreign=None,
        ttl=30,
        bbmd=None,
    )
    app = Device.from_args(namespace)
    app.without_rpm = without_rpm
    objects = {}
    for i in range(1, analogs + 1):
        obj = AnalogInputObject(
            objectIdentifier=("analog-input", i),
            objectName=f"ai-{i}",
            presentValue=0.0,
            reliability=Reliability.noFaultDetected,
            outOfService=False,
            eventState="normal",
            units="degreesCelsius",
            covIncrement=0.0,
        )
        app.add_object(obj)
        objects[f"analog-input:{i}"] = obj
    obj = BinaryInputObject(
        objectIdentifier=("binary-input", 1),
        objectName="bi-1",
        presentValue="inactive",
        reliability=Reliability.noFaultDetected,
        outOfService=False,
        eventState="normal",
        polarity="normal",
    )
    app.add_object(obj)
    objects["binary-input:1"] = obj
    return app, objects


def flags_of(obj):
    return [flag for flag, bit in zip(FLAGS, obj.statusFlags) if bit]


def changed(obj, change):
    """Runs `change` and tells the object's monitors (its COV detection) when the
    status flags it derives changed with it, as a device notifies its subscribers."""
    before = obj.statusFlags
    change()
    after = obj.statusFlags
    if list(before) != list(after):
        for monitor in obj._property_monitors["statusFlags"]:
            monitor(before, after)


class Peer:
    def __init__(self, app, objects):
        self.app = app
        self.objects = objects

    def object(self, request):
        name = request["object"]
        if name not in self.objects:
            raise ValueError(f"no object {name} here (objects: {', '.join(self.objects)})")
        return self.objects[name]

    async def answer(self, request):
        op = request.get("op")
        if op == "set":
            obj = self.object(request)
            value = request["value"]
            if request["object"].startswith("binary-"):
                if value not in (0, 1):
                    raise ValueError("a binary object's value is 0 (inactive) or 1 (active)")
                obj.presentValue = "active" if value else "inactive"
            else:
                obj.presentValue = float(value)
            return {}
        if op == "flags":
            # A device derives its status flags (clause 12): in-alarm from the event
            # state, fault from the reliability, out-of-service from out-of-service.
            obj = self.object(request)

            def change():
                obj.eventState = "offnormal" if request.get("in-alarm") else "normal"
                obj.outOfService = bool(request.get("out-of-service"))
                obj.reliability = "unreliableOther" if request.get("fault") else "noFaultDetected"

            changed(obj, change)
            return {"status-flags": flags_of(obj)}
        if op == "reliability":
            obj = self.object(request)

            def change():
                obj.reliability = Reliability(camel(request["reliability"]))

            changed(obj, change)
            return {"reliability": kebab(str(obj.reliability)), "status-flags": flags_of(obj)}
        if op == "stats":
            return {
                "subscriptions": self.app.subscriptions(),
                "notifications": self.app.notifications,
                "acks": self.app.acks,
                "refusals": self.app.refusals,
                "reads": self.app.reads,
                "rejected": self.app.rejected,
                "subscribe-requests": self.app.subscribe_requests,
            }
        raise ValueError(f"unknown op {op!r}")


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--device", type=int, required=True, help="the device instance")
    parser.add_argument("--analog-inputs", type=int, default=3)
    parser.add_argument(
        "--without-read-property-multiple",
        action="store_true",
        help="reject ReadPropertyMultiple (unrecognized-service), as small devices do",
    )
    args = parser.parse_args()

    app, objects = build(
        args.device, args.port, args.analog_inputs, args.without_read_property_multiple
    )
    peer = Peer(app, objects)
    print(
        json.dumps({"ready": True, "port": args.port, "device": args.device, "objects": list(objects)}),
        flush=True,
    )

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
        except (ValueError, KeyError, TypeError) as error:
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), flush=True)
    app.close()


if __name__ == "__main__":
    asyncio.run(main())
