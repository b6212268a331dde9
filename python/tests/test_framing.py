"""Frames both ways, checked byte by byte against the spec, and the broken
frames a client must refuse."""

import json
import socket
import struct
import threading
import unittest

import numpy as np

from meshtrain import ConnectionClosedError, ProtocolError, parse_address
from meshtrain.client import MAX_HEADER, encode_header, recv_header, recv_payload, send_frame

F32 = np.dtype("<f4")


def frame(header, payload=b"", *, magic=b"MTT1", hlen=None, plen=None):
    """A frame built by hand, with optional wrong fields."""
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    return (magic + struct.pack("<I", len(body) if hlen is None else hlen)
            + struct.pack("<Q", len(payload) if plen is None else plen) + body + payload)


class FramingTest(unittest.TestCase):
    def setUp(self):
        self.a, self.b = socket.socketpair()
        self.addCleanup(self.a.close)
        self.addCleanup(self.b.close)

    def recv_all(self, sock, n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            self.assertTrue(chunk, "stream ended early")
            buf += chunk
        return buf

    def test_send_frame_layout(self):
        x = np.arange(5, dtype=np.float32) - 2.5
        y = np.array([1e-30], dtype=np.float32)
        send_frame(self.a, {"op": "push", "samples": 3}, [x, y])
        magic, hlen, plen = struct.unpack("<4sIQ", self.recv_all(self.b, 16))
        self.assertEqual(magic, b"MTT1")
        self.assertEqual(json.loads(self.recv_all(self.b, hlen)), {"op": "push", "samples": 3})
        self.assertEqual(plen, 24)
        self.assertEqual(self.recv_all(self.b, plen), x.astype("<f4").tobytes() + y.astype("<f4").tobytes())

    def test_empty_payload_arrays_are_skipped(self):
        send_frame(self.a, {"op": "pull"}, [np.empty(0, np.float32)])
        self.assertEqual(struct.unpack("<4sIQ", self.recv_all(self.b, 16))[2], 0)

    def test_recv_frame(self):
        values = np.array([0.5, -3, 7e7], F32)
        self.b.sendall(frame({"ok": True, "delta": True}, values.tobytes()))
        header, plen = recv_header(self.a, max_payload=12)
        self.assertEqual(header, {"ok": True, "delta": True})
        out = np.zeros(3, F32)
        recv_payload(self.a, plen, [out])
        np.testing.assert_array_equal(out, values)

    def test_payload_over_one_mib_both_ways(self):
        n = 300_000  # 1.2 MB, more than a socket buffer: each side needs its own thread
        sent = np.random.default_rng(1).standard_normal(n).astype(np.float32)
        got = np.empty(n, F32)
        errors = []

        def echo():
            try:
                header, plen = recv_header(self.b, max_payload=4 * n)
                buf = np.empty(plen // 4, F32)
                recv_payload(self.b, plen, [buf])
                send_frame(self.b, {"ok": True, "echo": header["op"]}, [buf[: n // 2], buf[n // 2:]])
            except BaseException as e:
                errors.append(e)

        t = threading.Thread(target=echo)
        t.start()
        send_frame(self.a, {"op": "push"}, [sent])
        header, plen = recv_header(self.a, max_payload=4 * n)
        recv_payload(self.a, plen, [got])
        t.join()
        self.assertEqual(errors, [])
        self.assertEqual(header, {"ok": True, "echo": "push"})
        self.assertEqual(got.tobytes(), sent.tobytes())

    def test_broken_frames(self):
        cases = [  # (what is wrong, the frame, what the error must say)
            ("magic", frame({"ok": True}, magic=b"MTT2"), "magic"),
            ("short header", frame(b"{", hlen=1), "header length 1 "),
            ("long header", frame(b"{}", hlen=MAX_HEADER + 1), f"header length {MAX_HEADER + 1} "),
            ("odd payload", frame({"ok": True}, b"\0" * 6), "whole number of float32"),
            ("big payload", frame({"ok": True}, b"\0" * 16), "16 bytes exceeds the 8 expected"),
            ("not JSON", frame(b"{not json"), "not JSON"),
            ("not an object", frame(b"[1,2]"), "not an object"),
        ]
        for what, data, want in cases:
            with self.subTest(what), self.assertRaisesRegex(ProtocolError, want):
                a, b = socket.socketpair()
                with a, b:
                    b.sendall(data)
                    recv_header(a, max_payload=8)

    def test_payload_length_must_match_buffers(self):
        self.b.sendall(frame({"ok": True}, b"\0" * 8))
        _, plen = recv_header(self.a, max_payload=8)
        with self.assertRaisesRegex(ProtocolError, "want 12"):
            recv_payload(self.a, plen, [np.empty(3, F32)])

    def test_truncated_stream(self):
        self.b.sendall(frame({"ok": True}, b"\0" * 8)[:-3])
        self.b.close()
        _, plen = recv_header(self.a, max_payload=8)
        with self.assertRaises(ConnectionClosedError) as cm:
            recv_payload(self.a, plen, [np.empty(2, F32)])
        self.assertIsInstance(cm.exception, ConnectionError)

    def test_header_needs_finite_json(self):
        with self.assertRaises(ValueError):
            encode_header({"op": "eval", "loss": float("nan")})

    def test_parse_address(self):
        self.assertEqual(parse_address("tcp:127.0.0.1:7070"), (socket.AF_INET, ("127.0.0.1", 7070)))
        self.assertEqual(parse_address("tcp:[::1]:7070"), (socket.AF_INET6, ("::1", 7070)))
        self.assertEqual(parse_address("unix:/tmp/x.sock"), (socket.AF_UNIX, "/tmp/x.sock"))
        for bad in ("127.0.0.1:7070", "tcp:host", "tcp:host:0", "tcp::7070", "udp:h:1", "unix:"):
            with self.subTest(bad), self.assertRaises(ValueError):
                parse_address(bad)


if __name__ == "__main__":
    unittest.main()
