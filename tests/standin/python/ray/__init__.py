"""A stand-in for the part of Ray's Python API spark-launch uses: `ray.init(address="auto")`
and `ray.nodes()` (NodeManagerAddress, Alive, Resources.GPU), read from the stand-in `ray`
CLI's registry on the head."""
import json, os, socket

_address = None


def init(address="auto", **_kwargs):
    global _address
    if address == "auto":
        with open("/tmp/ray/address") as f:
            address = f.read().strip()
    _address = address


def nodes():
    host, port = _address.rsplit(":", 1)
    c = socket.create_connection((host, int(port)), timeout=5)
    c.sendall(b"LIST\n")
    data = c.makefile().readline()
    c.close()
    return json.loads(data)
