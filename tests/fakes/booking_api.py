"""A fake booking API on 127.0.0.1, for the booking example (docs/examples/booking.yaml):
search -> hold -> confirm, each step taking the id the previous one issued.

    api = BookingApi()          # serves on an ephemeral port, in a daemon thread
    api.url                     # "http://127.0.0.1:<port>"
    ...
    api.received                # every request, in order: method, path, headers, raw body
    api.close()

Endpoints (every one needs `X-API-Key: <api.api_key>`, else 401):

- `GET /slots?date=YYYY-MM-DD` -> 200 `{"date", "slots": [{"id": "SLT-…", "time", "room"}],
  "trace_id"}`: three slots per date, their ids random and the same on every search of that
  date.
- `POST /holds` `{"slot_id"}` -> 201 `{"id": "HLD-…", "slot_id", "expires_at"}`; a slot it
  did not issue is a 404, a slot already held a 409.
- `POST /bookings` `{"hold_id", "name"}` -> 201 `{"id": "BKG-…", "status": "confirmed",
  "hold_id", "slot_id", "name"}`; a hold it did not issue is a 404, one already booked a 409.

Errors are JSON `{"error": "..."}`. Bodies must be JSON objects (else 400). The server keeps
its state in memory, per instance. `python -m tests.fakes.booking_api --port 8765` runs one
in the foreground (its key printed) to try the example by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

API_KEY_HEADER = "X-API-Key"
DEFAULT_API_KEY = "bk-test-7Hq2LmN4pR8s"
TIMES = (("09:00", "Room A"), ("10:30", "Room B"), ("14:00", "Room A"))


@dataclass(frozen=True)
class ReceivedRequest:
    method: str
    path: str  # with the query string, as sent: "/slots?date=2026-12-03"
    headers: list[tuple[str, str]]  # as received, in order, names as sent
    body: bytes  # the raw bytes of the body

    def header(self, name: str) -> str | None:
        """The value of header `name` (any case), or None."""
        return next((v for n, v in self.headers if n.lower() == name.lower()), None)

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class _State:
    slots: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> slot
    by_date: dict[str, list[str]] = field(default_factory=dict)  # date -> slot ids
    holds: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> hold
    bookings: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> booking


def _new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4).upper()}"


class BookingApi:
    """The fake API: a ThreadingHTTPServer on 127.0.0.1, an ephemeral port unless `port`."""

    def __init__(self, *, api_key: str = DEFAULT_API_KEY, port: int = 0) -> None:
        self.api_key = api_key
        self.received: list[ReceivedRequest] = []
        self.state = _State()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()  # keep-alive connections, closed by close()
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.api = self
        self.port: int = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"BookingApi:{self.port}",
            daemon=True,
        )
        self._thread.start()

    def requests_to(self, method: str, path: str) -> list[ReceivedRequest]:
        """The requests received for METHOD path (path without its query string)."""
        with self._lock:
            return [r for r in self.received if r.method == method and r.path.split("?")[0] == path]

    def slot_ids(self, date: str) -> list[str]:
        """The ids of `date`'s slots, in the order searches list them ([] before any)."""
        with self._lock:
            return list(self.state.by_date.get(date, []))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            still_open = list(self._open)
        for sock in still_open:  # wake handler threads parked on idle keep-alive reads
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def __enter__(self) -> BookingApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the API, under the lock ------------------------------------------------------
    def answer(self, request: ReceivedRequest) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.received.append(request)
            if request.header(API_KEY_HEADER) != self.api_key:
                return 401, {"error": f"missing or wrong {API_KEY_HEADER}"}
            parts = urlsplit(request.path)
            route = (request.method, parts.path)
            if route == ("GET", "/slots"):
                return self._slots(parse_qs(parts.query).get("date", [""])[0])
            if route in (("POST", "/holds"), ("POST", "/bookings")):
                try:
                    body = json.loads(request.body)
                except ValueError:
                    return 400, {"error": "the body must be JSON"}
                if not isinstance(body, dict):
                    return 400, {"error": "the body must be a JSON object"}
                return self._hold(body) if parts.path == "/holds" else self._book(body)
            return 404, {"error": f"no route {request.method} {parts.path}"}

    def _slots(self, date: str) -> tuple[int, dict[str, Any]]:
        if len(date) != 10 or date[4] != "-" or date[7] != "-":
            return 400, {"error": "date must be YYYY-MM-DD"}
        if date not in self.state.by_date:
            ids = []
            for time, room in TIMES:
                slot_id = _new_id("SLT")
                self.state.slots[slot_id] = {"id": slot_id, "time": time, "room": room}
                ids.append(slot_id)
            self.state.by_date[date] = ids
        slots = [self.state.slots[i] for i in self.state.by_date[date]]
        return 200, {"date": date, "slots": slots, "trace_id": _new_id("TRC")}

    def _hold(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        slot_id = body.get("slot_id")
        if slot_id not in self.state.slots:
            return 404, {"error": f"unknown slot {slot_id!r}"}
        if any(h["slot_id"] == slot_id for h in self.state.holds.values()):
            return 409, {"error": f"slot {slot_id} is already held"}
        hold = {"id": _new_id("HLD"), "slot_id": slot_id, "expires_at": "2030-01-01T00:15:00Z"}
        self.state.holds[hold["id"]] = hold
        return 201, hold

    def _book(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        hold_id, name = body.get("hold_id"), body.get("name")
        if hold_id not in self.state.holds:
            return 404, {"error": f"unknown hold {hold_id!r}"}
        if not isinstance(name, str) or not name:
            return 400, {"error": "name is required"}
        if any(b["hold_id"] == hold_id for b in self.state.bookings.values()):
            return 409, {"error": f"hold {hold_id} is already booked"}
        booking = {
            "id": _new_id("BKG"),
            "status": "confirmed",
            "hold_id": hold_id,
            "slot_id": self.state.holds[hold_id]["slot_id"],
            "name": name,
        }
        self.state.bookings[booking["id"]] = booking
        return 201, booking


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.api._lock:
            self.server.api._open.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.api._lock:
                self.server.api._open.discard(self.connection)

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        request = ReceivedRequest(self.command, self.path, list(self.headers.items()), body)
        status, answer = self.server.api.answer(request)
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output quiet


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    api: BookingApi


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the fake booking API on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--api-key", default=DEFAULT_API_KEY)
    options = parser.parse_args()
    api = BookingApi(api_key=options.api_key, port=options.port)
    print(f"booking API on {api.url} ({API_KEY_HEADER}: {api.api_key}); Ctrl-C stops it")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        api.close()


if __name__ == "__main__":
    main()
