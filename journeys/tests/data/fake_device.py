# A stand-in for adapters/peers/modbus_device.py in the harness's own tests: it speaks the
# peers' control protocol (adapters/peers/README.md) and nothing else. It binds its port,
# prints one line that is not JSON, then {"ready": true}, and answers each request line
# with one JSON line; `exit` answers and then exits with status 3.
import argparse
import json
import socket
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--units")
args = parser.parse_args()
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", args.port))
server.listen()
print("fake device serving", file=sys.stderr)
print("not JSON, said before it is ready")
print(json.dumps({"ready": True, "port": args.port}))
sets = 0
for line in sys.stdin:
    request = json.loads(line)
    op = request["op"]
    if op == "set":
        sets += 1
        answer = {"ok": True, "echo": request}
    elif op == "stats":
        answer = {"ok": True, "sets": sets, "units": args.units}
    elif op == "fail":
        answer = {"ok": False, "error": "boom"}
    elif op == "exit":
        print(json.dumps({"ok": True}))
        sys.exit(3)
    else:
        answer = {"ok": False, "error": "unknown op " + op}
    print(json.dumps(answer))
