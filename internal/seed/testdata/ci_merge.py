"""Merge a user-data file the way cloud-init does and print the result.

Usage: python3 ci_merge.py USER_DATA_FILE OUT_DIR

Runs cloud-init's own UserDataProcessor (gzip, MIME, content-type sniffing)
and CloudConfigPartHandler (Merge-Type / merge_how) over the file, writes
each leaf part to OUT_DIR/part-NNN with its content type on the first line
of OUT_DIR/parts.txt, and prints the merged cloud-config as JSON.
Uses whatever cloudinit package is importable (PYTHONPATH selects one).
"""
import json
import os
import sys
import tempfile

from cloudinit import handlers, helpers, user_data, version
from cloudinit.handlers.cloud_config import CloudConfigPartHandler


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src, "rb") as f:
        blob = f.read()
    tmp = tempfile.mkdtemp()
    paths = helpers.Paths({"cloud_dir": tmp, "run_dir": tmp})
    msg = user_data.UserDataProcessor(paths).process(blob)
    cc_path = os.path.join(tmp, "cloud-config.txt")
    h = CloudConfigPartHandler(paths)
    h.cloud_fn = cc_path
    h.handle_part(None, handlers.CONTENT_START, None, None, None, None)
    listing = []
    n = 0
    for part in msg.walk():
        if part.get_content_maintype() == "multipart":
            continue
        n += 1
        ctype = part.get_content_type()
        payload = part.get_payload(decode=True)
        with open(os.path.join(out, "part-%03d" % n), "wb") as f:
            f.write(payload)
        listing.append(ctype)
        if ctype in ("text/cloud-config", "text/cloud-config-jsonp"):
            h.handle_part(None, ctype, part.get_filename() or "part-%03d" % n,
                          payload.decode("utf-8"), None, dict(part.items()))
    h.handle_part(None, handlers.CONTENT_END, None, None, None, None)
    with open(os.path.join(out, "parts.txt"), "w") as f:
        f.write("\n".join(listing) + "\n")
    merged = {}
    if os.path.exists(cc_path):
        from cloudinit import util
        merged = util.load_yaml(open(cc_path).read()) or {}
    json.dump({"version": version.version_string(), "merged": merged}, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
