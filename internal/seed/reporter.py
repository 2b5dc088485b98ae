#!/usr/bin/python3
# Kohaku first-boot reporter. Runs once per instance, after cloud-init's last
# stage, and tells the provider how the boot went: cloud-init's own status
# and errors, the hostname, SSH host keys, addresses and GPUs. It writes the
# report as one JSON line to the Kohaku virtio-serial port, which the provider
# reads through libvirt, and/or posts it to the phone-home URL, retrying both
# until one gets through. Only python3's standard
# library is used: every cloud-init image has it.
import glob
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

# The KOHAKU_REPORT_* variables exist for Kohaku's own tests of this script.
CONFIG = os.environ.get("KOHAKU_REPORT_CONFIG", "/etc/kohaku/report.json")
PORT = os.environ.get("KOHAKU_REPORT_PORT", "/dev/virtio-ports/org.kohaku.report.0")
STATE_DIR = os.environ.get("KOHAKU_REPORT_STATE", "/var/lib/kohaku")
INSTANCE_FILE = os.environ.get("KOHAKU_REPORT_INSTANCE", "/var/lib/cloud/data/instance-id")
STATUS_CMD = os.environ.get("KOHAKU_REPORT_STATUS_CMD", "cloud-init status --wait --format json").split()


def run(*cmd, timeout=120):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def cloud_init_status():
    out = run(*STATUS_CMD, timeout=3600)
    try:
        return json.loads(out[out.find("{"):])
    except ValueError:
        pass
    result = read("/run/cloud-init/result.json")
    try:
        return json.loads(result)
    except ValueError:
        return None


def host_keys():
    keys = {}
    for path in sorted(glob.glob("/etc/ssh/ssh_host_*_key.pub")):
        parts = read(path).split()
        if len(parts) >= 2:
            keys[parts[0]] = parts[0] + " " + parts[1]
    return keys


def addresses():
    out = run("ip", "-j", "addr", "show")
    try:
        links = json.loads(out)
    except ValueError:
        return []
    found = []
    for link in links:
        name = link.get("ifname", "")
        if name == "lo":
            continue
        for a in link.get("addr_info", []):
            if a.get("local"):
                found.append({
                    "interface": name,
                    "mac": link.get("address", ""),
                    "address": "%s/%s" % (a["local"], a.get("prefixlen", "")),
                })
    return found


def gpus():
    out = run("nvidia-smi", "--query-gpu=name,driver_version,memory.total",
              "--format=csv,noheader,nounits")
    found = []
    for line in out.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) == 3:
            try:
                mem = int(float(cols[2]))
            except ValueError:
                mem = 0
            found.append({"name": cols[0], "driver_version": cols[1], "memory_mib": mem})
    return found


def post(url, body):
    try:
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=15) as resp:
            return 200 <= resp.status < 300
    except OSError as e:
        print("kohaku-report: post failed: %s" % type(e).__name__, file=sys.stderr)
        return False


def write_port(body):
    # A virtio-serial write blocks while no one on the host holds the channel
    # open, so never block: the provider opens the channel while it waits,
    # and the next try gets through. The leading newline ends any partial
    # line an interrupted earlier try left.
    try:
        fd = os.open(PORT, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        data = b"\n" + body + b"\n"
        while data:
            data = data[os.write(fd, data):]
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def deliver(cfg, body):
    # Try the channel every second (cheap: one open that fails at once while
    # the host is not reading) and post with backoff, until one gets through.
    url = cfg.get("url")
    if not url and not os.path.exists(PORT):
        print("kohaku-report: no URL and no channel: nowhere to report", file=sys.stderr)
        return False
    deadline = time.time() + float(os.environ.get("KOHAKU_REPORT_DEADLINE", 6 * 3600))
    next_post, delay = 0.0, 2
    while True:
        if os.path.exists(PORT) and write_port(body):
            return True
        now = time.time()
        if url and now >= next_post:
            if post(url, body):
                return True
            next_post, delay = now + delay, min(delay * 2, 60)
        if now > deadline:
            return False
        time.sleep(1)


def main():
    try:
        cfg = json.loads(read(CONFIG))
    except ValueError:
        print("kohaku-report: no configuration", file=sys.stderr)
        return 1
    instance = read(INSTANCE_FILE).strip() or "unknown"
    stamp = os.path.join(STATE_DIR, "reported-" + instance.replace("/", "_"))
    if os.path.exists(stamp):
        return 0
    report = {
        "token": cfg.get("token", ""),
        "instance_id": instance,
        "hostname": socket.gethostname(),
        "fqdn": socket.getfqdn(),
        "host_keys": host_keys(),
        "addresses": addresses(),
        "cloud_init": cloud_init_status(),
        "gpus": gpus(),
    }
    if not deliver(cfg, json.dumps(report).encode()):
        return 1
    os.makedirs(STATE_DIR, exist_ok=True)
    open(stamp, "w").close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
