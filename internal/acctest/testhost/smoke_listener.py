"""The phone-home listener of testhost.sh smoke.

usage: smoke_listener.py OUT PORTFILE LIFETIME

Listens on 127.0.0.1 on a free port, appends "<path> <body>" to OUT for every
POST, writes its port to PORTFILE (by a rename, so a reader never sees half of
it) and stops by itself after LIFETIME seconds.
"""
import http.server
import os
import sys
import time

out, portfile, lifetime = sys.argv[1], sys.argv[2], float(sys.argv[3])


class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(out, "ab") as f:
            f.write(self.path.encode() + b" " + body + b"\n")
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *a):
        pass


srv = http.server.HTTPServer(("127.0.0.1", 0), H)
srv.timeout = 1
with open(portfile + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(portfile + ".tmp", portfile)
end = time.time() + lifetime  # stops by itself
while time.time() < end:
    srv.handle_request()
