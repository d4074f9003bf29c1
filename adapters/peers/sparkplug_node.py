#!/usr/bin/env python3
"""A Sparkplug B edge node (and optional device) for Grid's tests and journeys.

Speaks the control protocol of adapters/peers/README.md: prints one JSON line with
"ready" once the broker has routed its births (the node subscribes to its own last
birth and waits for it: a subscriber that connects after "ready" cannot receive
them, so its first value comes from the rebirth it asks for), then answers one JSON line per JSON line read
on stdin. Logs go to stderr.

Payloads are built with mqtt-spb-wrapper's protobuf classes and helpers (`Payload`,
`addMetric`, `addNullMetric`, `MetricDataType`); the MQTT session is paho-mqtt's,
driven directly, because the node must craft what a well-behaved library will not: a
skipped sequence number, a null, an alias no birth declared, and deaths (the MQTT will
included) whose bdSeq is the current session's.

bdSeq names one MQTT session: it is set in the will before each connect, carried by
the NBIRTH of that session, and incremented for the next session (after a lost
connection, or on `birth` after `death`). A rebirth command (NCMD
`Node Control/Rebirth`) republishes NBIRTH (seq 0, same bdSeq) and DBIRTH.
"""

import argparse
import json
import sys
import threading
import time

import paho.mqtt.client as mqtt
from mqtt_spb_wrapper.spb_protobuf import MetricDataType, Payload, addMetric
from mqtt_spb_wrapper.spb_protobuf.sparkplug_b import addNullMetric

NAMESPACE = "spBv1.0"
REBIRTH = "Node Control/Rebirth"
CONNECT_TIMEOUT_S = 10.0

INTEGER_TYPES = {"Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64"}
FLOAT_TYPES = {"Float", "Double"}
STRING_TYPES = {"String", "Text", "UUID"}


def log(*args):
    print("sparkplug_node:", *args, file=sys.stderr, flush=True)


def now_ms():
    return int(time.time() * 1000)


def parse_value(type_name, text):
    if type_name in INTEGER_TYPES or type_name == "DateTime":
        return int(text)
    if type_name in FLOAT_TYPES:
        return float(text)
    if type_name == "Boolean":
        if isinstance(text, bool):
            return text
        return str(text).lower() in ("1", "true", "yes")
    return str(text)


class Metric:
    def __init__(self, spec, alias):
        name, rest = spec.split(":", 1)
        type_name, value = rest.split("=", 1)
        if not hasattr(MetricDataType, type_name):
            raise ValueError(f"unknown datatype {type_name}")
        self.name = name
        self.type_name = type_name
        self.datatype = getattr(MetricDataType, type_name)
        self.alias = alias
        self.value = parse_value(type_name, value)


class Node:
    def __init__(self, args):
        self.group = args.group
        self.node = args.node
        self.device = args.device
        host, port = args.broker.rsplit(":", 1)
        self.host, self.port = host, int(port)
        # Aliases 1.. in the order given; the node's own bdSeq has none.
        self.metrics = {}
        for i, spec in enumerate(args.metric):
            m = Metric(spec, i + 1)
            self.metrics[m.name] = m
        self.lock = threading.RLock()
        self.bdseq = 0
        self.seq = 0
        self.rebirths = 0
        self.published = 0
        self.skip = 0
        self.dead = False
        self.connected = threading.Event()
        # Set when the broker routed the session's last birth back to the node itself:
        # from then on no later subscriber can receive that birth.
        self.births_routed = threading.Event()
        client_id = args.client_id or f"spb-node-{self.group}-{self.node}"
        self.client = mqtt.Client(client_id=client_id, clean_session=True)
        self.client.on_connect = self.on_connect
        self.client.on_disconnect = self.on_disconnect
        self.client.on_message = self.on_message
        self.client.reconnect_delay_set(min_delay=1, max_delay=2)

    # Topics ---------------------------------------------------------------------------
    def topic(self, kind):
        if kind.startswith("D"):
            return f"{NAMESPACE}/{self.group}/{kind}/{self.node}/{self.device}"
        return f"{NAMESPACE}/{self.group}/{kind}/{self.node}"

    def data_kind(self):
        return "DDATA" if self.device else "NDATA"

    # Payloads -------------------------------------------------------------------------
    def next_seq(self):
        seq = (self.seq + self.skip) % 256
        self.skip = 0
        self.seq = (seq + 1) % 256
        return seq

    def death_payload(self):
        payload = Payload()
        payload.timestamp = now_ms()
        addMetric(payload, "bdSeq", None, MetricDataType.Int64, self.bdseq, now_ms())
        return payload

    def add_value(self, payload, m, name, alias):
        addMetric(payload, name, alias, m.datatype, m.value, now_ms())

    def publish(self, kind, payload):
        info = self.client.publish(self.topic(kind), bytearray(payload.SerializeToString()), qos=0)
        if info.rc == mqtt.MQTT_ERR_SUCCESS:
            self.published += 1
        else:
            log("publish", kind, "failed:", mqtt.error_string(info.rc))

    def publish_births(self):
        with self.lock:
            self.births_routed.clear()
            self.seq = 0
            self.skip = 0
            nbirth = Payload()
            nbirth.timestamp = now_ms()
            nbirth.seq = self.next_seq()
            addMetric(nbirth, "bdSeq", None, MetricDataType.Int64, self.bdseq, now_ms())
            addMetric(nbirth, REBIRTH, None, MetricDataType.Boolean, False, now_ms())
            if not self.device:
                for m in self.metrics.values():
                    self.add_value(nbirth, m, m.name, m.alias)
            self.publish("NBIRTH", nbirth)
            if self.device:
                dbirth = Payload()
                dbirth.timestamp = now_ms()
                dbirth.seq = self.next_seq()
                for m in self.metrics.values():
                    self.add_value(dbirth, m, m.name, m.alias)
                self.publish("DBIRTH", dbirth)
            self.dead = False

    def data_payload(self):
        payload = Payload()
        payload.timestamp = now_ms()
        payload.seq = self.next_seq()
        return payload

    # MQTT callbacks (paho's network thread) -------------------------------------------
    def set_will(self):
        death = bytearray(self.death_payload().SerializeToString())
        self.client.will_set(self.topic("NDEATH"), death, qos=0)

    def on_connect(self, client, userdata, flags, rc):
        if rc != 0:
            log("connect refused:", mqtt.connack_string(rc))
            return
        client.subscribe(self.topic("NCMD"), qos=0)
        client.subscribe(self.last_birth_topic(), qos=0)
        self.publish_births()
        self.connected.set()

    def on_disconnect(self, client, userdata, rc):
        with self.lock:
            self.connected.clear()
            if rc != 0:
                # The next session (paho reconnects by itself) is a new bdSeq.
                self.bdseq = (self.bdseq + 1) % 256
                self.set_will()
                log("connection lost:", mqtt.error_string(rc), "next bdSeq", self.bdseq)

    def last_birth_topic(self):
        return self.topic("DBIRTH" if self.device else "NBIRTH")

    def on_message(self, client, userdata, msg):
        if msg.topic == self.last_birth_topic():
            self.births_routed.set()
            return
        if msg.topic != self.topic("NCMD"):
            return
        payload = Payload()
        try:
            payload.ParseFromString(msg.payload)
        except Exception as e:  # noqa: BLE001 - a peer's garbage is logged, not fatal
            log("undecodable command on", msg.topic, e)
            return
        for metric in payload.metrics:
            if metric.name == REBIRTH and metric.boolean_value:
                with self.lock:
                    self.rebirths += 1
                    dead = self.dead
                log("rebirth requested", "(dead: ignored)" if dead else "")
                if not dead:
                    self.publish_births()

    # Session --------------------------------------------------------------------------
    def start_session(self):
        self.set_will()
        self.client.connect_async(self.host, self.port, keepalive=10)
        self.client.loop_start()
        if not self.connected.wait(CONNECT_TIMEOUT_S):
            raise RuntimeError(f"no connection to {self.host}:{self.port}")
        if not self.births_routed.wait(CONNECT_TIMEOUT_S):
            raise RuntimeError("the broker never routed the births")

    def end_session(self):
        self.client.disconnect()
        self.client.loop_stop()
        self.connected.clear()

    # Control ops ----------------------------------------------------------------------
    def metric_named(self, request):
        name = request.get("metric")
        if name not in self.metrics:
            raise ValueError(f"no metric {name!r}")
        return self.metrics[name]

    def op_set(self, request):
        m = self.metric_named(request)
        with self.lock:
            m.value = parse_value(m.type_name, request["value"])
            payload = self.data_payload()
            self.add_value(payload, m, None, m.alias)  # by alias only
            self.publish(self.data_kind(), payload)
            return {"seq": payload.seq}

    def op_null(self, request):
        m = self.metric_named(request)
        with self.lock:
            payload = self.data_payload()
            addNullMetric(payload, None, m.alias, m.datatype)
            self.publish(self.data_kind(), payload)
            return {"seq": payload.seq}

    def op_gap(self, request):
        with self.lock:
            self.skip = 1
        return {}

    def op_unknown_alias(self, request):
        with self.lock:
            alias = len(self.metrics) + 100
            payload = self.data_payload()
            addMetric(payload, None, alias, MetricDataType.Double, 0.0, now_ms())
            self.publish(self.data_kind(), payload)
            return {"alias": alias, "seq": payload.seq}

    def op_death(self, request):
        with self.lock:
            if self.device:
                payload = Payload()
                payload.timestamp = now_ms()
                payload.seq = self.next_seq()
                self.publish("DDEATH", payload)
            else:
                self.publish("NDEATH", self.death_payload())
            self.dead = True
        return {}

    def op_birth(self, request):
        # A new session: leave cleanly (no will), connect with the next bdSeq.
        self.end_session()
        with self.lock:
            self.bdseq = (self.bdseq + 1) % 256
        self.start_session()
        return {"bdseq": self.bdseq}

    def op_stats(self, request):
        with self.lock:
            return {
                "seq": self.seq,
                "bdseq": self.bdseq,
                "rebirths": self.rebirths,
                "published": self.published,
                "connected": self.connected.is_set(),
            }

    def stop(self):
        with self.lock:
            if self.connected.is_set():
                self.publish("NDEATH", self.death_payload())
        time.sleep(0.1)
        self.end_session()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", required=True, help="HOST:PORT")
    parser.add_argument("--group", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--device")
    parser.add_argument("--client-id")
    parser.add_argument("--metric", action="append", default=[], help="NAME:TYPE=VALUE")
    args = parser.parse_args()

    node = Node(args)
    node.start_session()
    print(json.dumps({"ready": True, "bdseq": node.bdseq}), flush=True)

    ops = {
        "set": node.op_set,
        "null": node.op_null,
        "gap": node.op_gap,
        "unknown-alias": node.op_unknown_alias,
        "death": node.op_death,
        "birth": node.op_birth,
        "stats": node.op_stats,
    }
    try:
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                request = json.loads(line)
                op = request.get("op")
                if op == "stop":
                    print(json.dumps({"ok": True}), flush=True)
                    break
                if op not in ops:
                    raise ValueError(f"unknown op {op!r}")
                answer = {"ok": True}
                answer.update(ops[op](request))
            except Exception as e:  # noqa: BLE001 - every request gets one answer
                answer = {"ok": False, "error": str(e)}
            print(json.dumps(answer), flush=True)
    except KeyboardInterrupt:
        pass
    node.stop()


def on_sigterm(*_):
    raise KeyboardInterrupt


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, on_sigterm)
    main()
