#!/usr/bin/env python3
"""Writes the J1939 capture fixtures of adapters/tests/data/j1939/ (checked in).

An ElectronicControlUnit of the can-j1939 stack sends each message on a python-can
virtual bus, so the stack itself does the TP.BAM segmentation of messages over 8
bytes; a second bus on the same channel receives every frame, which is stamped with
the scenario's own clock (so the files are the same on every run) and written with
python-can's CanutilsLogWriter (the `candump -L` format). Run it again only to change
the fixtures:

    python3 adapters/peers/make_j1939_logs.py adapters/tests/data/j1939

Scenario time starts at 1700000000.000000 (Unix seconds). What each file holds is
listed in adapters/tests/data/j1939/README.md.
"""

import argparse
import os
import queue
import struct
import time

import can
import j1939

CHANNEL = "grid-j1939-fixtures"
START_S = 1_700_000_000.0
# The scenario's pace between BAM packets (J1939-21 allows 50–200 ms; the stack's own).
BAM_GAP_S = 0.05


class Capture:
    """The ECU's frames as they cross the virtual bus, restamped on the scenario clock."""

    def __init__(self):
        # The stack's default BAM pace (its Timeout.Tb, 50 ms): can-j1939 2.0.12 keeps a
        # `minimum_tp_bam_dt_interval` only when it is None (then Tb), so none is given.
        self.ecu = j1939.ElectronicControlUnit()
        self.ecu.connect(interface="virtual", channel=CHANNEL)
        self.rx = can.Bus(interface="virtual", channel=CHANNEL)
        self.frames = []
        self.clock = START_S

    def close(self):
        self.ecu.disconnect()
        self.rx.shutdown()

    def at(self, seconds):
        """Moves the scenario clock to START + seconds."""
        self.clock = START_S + seconds

    def send(self, pgn, data, source=0x00, priority=6):
        """Sends one message through the stack; returns its frames as received, the
        first at the scenario clock, BAM packets BAM_GAP_S apart."""
        data_page = (pgn >> 16) & 0x1
        pdu_format = (pgn >> 8) & 0xFF
        pdu_specific = pgn & 0xFF
        assert self.ecu.send_pgn(
            data_page, pdu_format, pdu_specific, priority, source, list(data)
        )
        expected = 1 if len(data) <= 8 else 1 + (len(data) + 6) // 7
        frames = []
        deadline = time.monotonic() + 10
        while len(frames) < expected:
            msg = self.rx.recv(timeout=max(0.0, deadline - time.monotonic()))
            if msg is None:
                raise SystemExit(f"the stack sent {len(frames)} of {expected} frames")
            msg.timestamp = self.clock + len(frames) * BAM_GAP_S
            msg.channel = "can0"
            msg.is_rx = True
            frames.append(msg)
        self.frames.extend(frames)
        self.clock = frames[-1].timestamp
        return frames

    def write(self, path):
        writer = can.CanutilsLogWriter(path)
        for msg in self.frames:
            writer.on_message_received(msg)
        writer.stop()
        self.frames = []


def eec1(rpm=None, raw=None, pedal_torque=0x7D):
    """EEC1 (PGN 61444): engine speed SPN 190, bytes 4–5, 0.125 rpm/bit."""
    value = raw if raw is not None else int(rpm / 0.125)
    return bytes([0xF0, pedal_torque, pedal_torque]) + struct.pack("<H", value) + bytes([0x00, 0xFF, 0xFF])


def et1(coolant_raw, oil_raw):
    """ET1 (PGN 65262): coolant SPN 110 byte 1, oil temperature SPN 175 bytes 3–4."""
    return bytes([coolant_raw, 0xFF]) + struct.pack("<H", oil_raw) + bytes([0xFF] * 4)


def ec1(idle_rpm, idle_torque_pct):
    """EC1 (PGN 65251, 39 bytes): idle speed SPN 188 bytes 1–2, torque SPN 539 byte 3."""
    head = struct.pack("<H", int(idle_rpm / 0.125)) + bytes([idle_torque_pct + 125])
    return head + bytes([0xFF] * 36)


def single_frames(capture, path):
    # Every SPN of the table once from SA 0, then EEC1's not-available and error.
    capture.at(0.0)
    capture.send(61444, eec1(rpm=1500), priority=3)  # 1500 rpm
    capture.at(0.1)
    capture.send(65262, et1(125, int((97 + 273) / 0.03125)))  # 85 °C, 97 °C
    capture.at(0.2)
    capture.send(65265, b"\xff" + struct.pack("<H", 80 * 256) + b"\xff" * 5)  # 80 km/h
    capture.at(0.3)
    capture.send(65276, bytes([0xFF, 200]) + b"\xff" * 6)  # 80 %
    capture.at(0.4)
    capture.send(65263, bytes([0xFF, 0xFF, 0xFF, 100]) + b"\xff" * 4)  # 400 kPa
    capture.at(0.5)
    capture.send(65253, struct.pack("<I", 200_000) + b"\xff" * 4)  # 10000 h
    capture.at(0.6)
    capture.send(61443, bytes([0xFF, 125]) + b"\xff" * 6, priority=3)  # 50 %
    capture.at(0.7)
    capture.send(61444, eec1(raw=0xFF00), priority=3)  # not available
    capture.at(0.8)
    capture.send(61444, eec1(raw=0xFE12), priority=3)  # error indicator
    capture.at(0.9)
    capture.send(61444, eec1(rpm=1600), source=0x01, priority=3)  # another source
    capture.at(1.0)
    capture.send(61444, eec1(rpm=1700), priority=3)
    capture.write(path)


def bam(capture, path):
    # EEC1 from SA 0 every 100 ms around a complete EC1 BAM (SA 0), then a BAM whose
    # last packets were lost: the next frame comes more than 750 ms after its last.
    capture.at(0.0)
    capture.send(61444, eec1(rpm=1000), priority=3)
    capture.at(0.1)
    capture.send(65251, ec1(800, 10))  # CM at 0.1, DT 1..6 at 0.15..0.4
    capture.at(0.5)
    capture.send(61444, eec1(rpm=1100), priority=3)
    capture.at(1.0)
    start = len(capture.frames)
    capture.send(65251, ec1(850, 12))  # CM at 1.0, DT 1..6 at 1.05..1.3
    # The bus lost packets 4 to 6 of the second BAM.
    del capture.frames[start + 4 :]
    capture.at(2.5)
    capture.send(61444, eec1(rpm=1200), priority=3)
    capture.write(path)


def journey(capture, path):
    # The journey's engine: EEC1 from SA 0 every 250 ms for 30 s, 900 rpm rising by
    # 10 rpm a frame; frames 20–31 (5.0 s to 7.75 s) say "not available" (the sensor
    # dropped out for 3 s).
    for i in range(120):
        capture.at(i * 0.25)
        if 20 <= i < 32:
            capture.send(61444, eec1(raw=0xFFFF), priority=3)
        else:
            capture.send(61444, eec1(rpm=900 + 10 * i), priority=3)
    capture.write(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    args = parser.parse_args()
    os.makedirs(args.directory, exist_ok=True)
    capture = Capture()
    try:
        single_frames(capture, os.path.join(args.directory, "single-frames.log"))
        bam(capture, os.path.join(args.directory, "bam.log"))
        journey(capture, os.path.join(args.directory, "journey-engine.log"))
    finally:
        capture.close()


if __name__ == "__main__":
    main()
