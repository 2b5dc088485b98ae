#!/usr/bin/python3
# Kohaku's guest reporter. Once per instance, after cloud-init's last stage,
# it tells the provider how the boot went: cloud-init's own status
# and errors, the hostname, SSH host keys, addresses, routes, DNS servers and
# GPUs, and whether the guest has what the seed declared (its "expect":
# addresses on the NIC with each declared MAC, default routes, nameservers,
# search domains, hostname, mounted shares). It writes the
# report, stamped with the guest's clock at each try ("sent_at"), as one JSON line to the Kohaku virtio-serial port, which the provider
# reads through libvirt, and/or posts it to the phone-home URL, retrying both
# until one gets through. Then, when its configuration has a "heartbeat"
# interval, it stays as a small agent (on every boot) that writes a
# heartbeat line to the same port (load, memory, disk, uptime, cloud-init's
# state, GPUs from nvidia-smi): at once when a reader on the host opens the
# channel, then every interval while it stays. Heartbeats are dropped, not
# queued, while nobody reads, and a write never blocks. Only python3's
# standard library is used: every cloud-init image has it.
import datetime
import glob
import hashlib
import hmac
import ipaddress
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request

# The KOHAKU_REPORT_* variables exist for Kohaku's own tests of this script.
CONFIG = os.environ.get("KOHAKU_REPORT_CONFIG", "/etc/kohaku/report.json")
PORT = os.environ.get("KOHAKU_REPORT_PORT", "/dev/virtio-ports/org.kohaku.report.0")
STATE_DIR = os.environ.get("KOHAKU_REPORT_STATE", "/var/lib/kohaku")
# The report is also left here for the QEMU guest agent to read.
SAVED = os.environ.get("KOHAKU_REPORT_SAVE", "/run/kohaku/report.json")
INSTANCE_FILE = os.environ.get("KOHAKU_REPORT_INSTANCE", "/var/lib/cloud/data/instance-id")
STATUS_CMD = os.environ.get("KOHAKU_REPORT_STATUS_CMD", "cloud-init status --wait --format json").split()
# ROOT prefixes the files the checks read (/proc, /sys, /etc, /run); IP and
# RESOLVECTL are the commands asked first (a name that does not exist makes
# the checks use the files alone, as on an image without iproute2).
ROOT = os.environ.get("KOHAKU_REPORT_ROOT", "")
IP = os.environ.get("KOHAKU_REPORT_IP", "ip")
RESOLVECTL = os.environ.get("KOHAKU_REPORT_RESOLVECTL", "resolvectl")
HOSTNAME = os.environ.get("KOHAKU_REPORT_HOSTNAME", "")
# Commands that look at the guest's configuration must answer quickly.
FACT_TIMEOUT = float(os.environ.get("KOHAKU_REPORT_FACT_TIMEOUT", 10))
NVIDIA_SMI = os.environ.get("KOHAKU_REPORT_NVIDIA_SMI", "nvidia-smi")
# How often the heartbeat agent looks whether a reader opened the channel.
TICK = float(os.environ.get("KOHAKU_REPORT_TICK", 1))
# The most GPUs a heartbeat lists, and the longest text it carries.
MAX_GPUS = 16
MAX_TEXT = 128
STARTED = time.time()


def run(*cmd, timeout=120):
    """cmd's output, or "" when it is missing, fails to start or outlives
    timeout. It runs in a session of its own so that a timeout kills it and
    anything it started (a child holding the pipe would block the read)."""
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL, text=True, errors="replace",
                             start_new_session=True)
    except (OSError, ValueError, subprocess.SubprocessError):
        return ""
    try:
        return p.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.communicate(timeout=5)
        except subprocess.SubprocessError:
            pass
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


def root(path):
    return ROOT + path


def ip_json(*args):
    """ip's JSON output for args, or None when ip is missing or fails."""
    out = run(IP, "-j", *args, timeout=FACT_TIMEOUT)
    try:
        v = json.loads(out)
    except ValueError:
        return None
    return v if isinstance(v, list) else None


def sys_links():
    """Interface name -> MAC from /sys/class/net (no iproute2 needed)."""
    links = {}
    for path in sorted(glob.glob(root("/sys/class/net/*/address"))):
        name = os.path.basename(os.path.dirname(path))
        links[name] = read(path).strip().lower()
    return links


def addresses():
    """Every address of every interface but lo: from ip, else /proc."""
    links = ip_json("addr", "show")
    found = []
    if links is not None:
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
    macs = sys_links()
    for name, mac in sorted(macs.items()):
        if name == "lo":
            continue
        for a in ipv4_of(name):
            found.append({"interface": name, "mac": mac, "address": a})
    for line in read(root("/proc/net/if_inet6")).splitlines():
        f = line.split()
        if len(f) < 6 or f[5] == "lo":
            continue
        try:
            a = ipaddress.IPv6Address(int(f[0], 16))
            found.append({"interface": f[5], "mac": macs.get(f[5], ""), "address": "%s/%d" % (a, int(f[2], 16))})
        except ValueError:
            continue
    return found


def ipv4_of(name):
    """The primary IPv4 address of an interface, through ioctls (no ip)."""
    if ROOT:
        return []
    import fcntl
    import struct
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            req = struct.pack("256s", name.encode()[:15])
            addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])  # SIOCGIFADDR
            mask = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x891b, req)[20:24])  # SIOCGIFNETMASK
        return [str(ipaddress.IPv4Interface(addr + "/" + mask))]
    except (OSError, ValueError):
        return []


def routes():
    """The main table's routes of both families (lo and unreachable left
    out): from ip, else /proc/net/route and /proc/net/ipv6_route."""
    found = []
    for family, args in (("inet", ("route", "show")), ("inet6", ("-6", "route", "show"))):
        got = ip_json(*args)
        if got is None:
            found.extend(proc_routes(family))
            continue
        for r in got:
            if r.get("type") in ("unreachable", "prohibit", "blackhole") or r.get("dev") == "lo":
                continue
            dst = r.get("dst", "")
            if dst == "default":
                dst = "0.0.0.0/0" if family == "inet" else "::/0"
            elif "/" not in dst and dst:
                dst += "/32" if family == "inet" else "/128"
            hops = r.get("nexthops") or [r]
            for h in hops:
                found.append({"family": family, "destination": dst,
                              "gateway": h.get("gateway", ""), "interface": h.get("dev", r.get("dev", ""))})
    return found


def proc_routes(family):
    found = []
    if family == "inet":
        for line in read(root("/proc/net/route")).splitlines()[1:]:
            f = line.split()
            if len(f) < 8 or f[0] == "lo":
                continue
            try:
                flags = int(f[3], 16)
                if not flags & 0x1 or flags & 0x200:  # RTF_UP, RTF_REJECT
                    continue
                dst = socket.inet_ntoa(int(f[1], 16).to_bytes(4, "little"))
                mask = bin(int(f[7], 16)).count("1")
                gw = socket.inet_ntoa(int(f[2], 16).to_bytes(4, "little")) if flags & 0x2 else ""
            except (ValueError, OSError):
                continue
            found.append({"family": family, "destination": "%s/%d" % (dst, mask), "gateway": gw, "interface": f[0]})
        return found
    for line in read(root("/proc/net/ipv6_route")).splitlines():
        f = line.split()
        if len(f) < 10 or f[9] == "lo":
            continue
        try:
            flags = int(f[8], 16)
            if flags & 0x200 or flags & 0x80000000:  # RTF_REJECT, RTF_LOCAL
                continue
            dst = ipaddress.IPv6Address(int(f[0], 16))
            gw = ipaddress.IPv6Address(int(f[4], 16)) if flags & 0x2 else None
            plen = int(f[1], 16)
        except ValueError:
            continue
        if dst.is_multicast:
            continue
        found.append({"family": family, "destination": "%s/%d" % (dst, plen),
                      "gateway": str(gw) if gw else "", "interface": f[9]})
    return found


def resolv_conf(path):
    ns, search = [], []
    for line in read(path).splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == "nameserver":
            ns.append(f[1])
        elif len(f) >= 2 and f[0] in ("search", "domain"):
            search.extend(f[1:])
    return ns, search


def dns():
    """The nameservers and search domains in use: /etc/resolv.conf, or, when
    it points at systemd-resolved's stub, what resolved uses."""
    ns, search = resolv_conf(root("/etc/resolv.conf"))
    stub = [n for n in ns if n.startswith("127.0.0.53") or n.startswith("127.0.0.54")]
    if not stub:
        return ns, search, "/etc/resolv.conf"
    rns, rsearch = resolv_conf(root("/run/systemd/resolve/resolv.conf"))
    out = run(RESOLVECTL, "dns", timeout=FACT_TIMEOUT)
    for line in out.splitlines():
        _, _, servers = line.partition(":")
        for v in servers.split():
            v = v.split("#")[0]
            if v not in rns:
                rns.append(v)
    out = run(RESOLVECTL, "domain", timeout=FACT_TIMEOUT)
    for line in out.splitlines():
        _, _, domains = line.partition(":")
        for d in domains.split():
            d = d.lstrip("~")
            if d and d != "." and d not in rsearch:
                rsearch.append(d)
    return rns, rsearch + [s for s in search if s not in rsearch], "systemd-resolved"


def mounts():
    found = []
    for line in read(root("/proc/mounts")).splitlines():
        f = line.split()
        if len(f) >= 3:
            point = f[1].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
            found.append({"path": point, "type": f[2], "source": f[0]})
    return found


def same_ip(a, b):
    try:
        return ipaddress.ip_address(a.split("%")[0]) == ipaddress.ip_address(b.split("%")[0])
    except ValueError:
        return a == b


def check(what, expected, found, ok):
    return {"what": what, "expected": expected, "found": found, "ok": ok}


def compare(expect, facts):
    """The checks of what the seed declared against what the guest has.
    A check that cannot tell says so with ok null."""
    checks = []
    links = facts["links"]  # name -> mac
    addrs = facts["addresses"]
    rts = facts["routes"]
    for nic in expect.get("nics") or []:
        mac = (nic.get("mac") or "").lower()
        names = [n for n, m in sorted(links.items()) if m == mac]
        if nic.get("name") in names:
            names = [nic["name"]]
        if not names:
            seen = ", ".join("%s (%s)" % (n, m) for n, m in sorted(links.items()) if n != "lo") or "none"
            checks.append(check("interface", "with MAC " + mac, seen, False))
            continue
        name = names[0]
        on = "on %s (%s)" % (name, mac)
        have = [a["address"] for a in addrs if a["interface"] == name]
        for want in nic.get("addresses") or []:
            fam = "IPv6" if ":" in want else "IPv4"
            try:
                w = ipaddress.ip_interface(want)
                ok = any(ipaddress.ip_interface(h) == w for h in have if "/" in h)
            except ValueError:
                ok = want in have
            checks.append(check(fam + " address", "%s %s" % (want, on), ", ".join(have) or "none", ok))
        for fam, key in (("IPv4", "dhcp4"), ("IPv6", "dhcp6")):
            if not nic.get(key):
                continue
            got = []
            for h in have:
                try:
                    i = ipaddress.ip_interface(h)
                except ValueError:
                    continue
                if i.version == (4 if fam == "IPv4" else 6) and not i.ip.is_link_local:
                    got.append(h)
            checks.append(check("DHCP %s address" % fam, on, ", ".join(have) or "none", bool(got)))
        for fam, key, family in (("IPv4", "gateway4", "inet"), ("IPv6", "gateway6", "inet6")):
            gw = nic.get(key)
            if not gw:
                continue
            if rts is None:
                checks.append(check(fam + " default route", "via %s %s" % (gw, on), "cannot read the routes", None))
                continue
            defaults = [r for r in rts if r["family"] == family and r["destination"] in ("0.0.0.0/0", "::/0")]
            ok = any(same_ip(r["gateway"], gw) and r["interface"] == name for r in defaults)
            seen = ", ".join("via %s on %s" % (r["gateway"] or "(none)", r["interface"]) for r in defaults) or "none"
            checks.append(check(fam + " default route", "via %s %s" % (gw, on), seen, ok))
    ns, search, source = facts["dns"]
    for want in expect.get("nameservers") or []:
        checks.append(check("nameserver", want, "%s (%s)" % (", ".join(ns) or "none", source),
                            any(same_ip(n, want) for n in ns)))
    for want in expect.get("search") or []:
        checks.append(check("search domain", want, "%s (%s)" % (", ".join(search) or "none", source),
                            want.rstrip(".") in [s.rstrip(".") for s in search]))
    host = expect.get("hostname")
    if host:
        got = facts["hostname"]
        checks.append(check("hostname", host, got, got == host or got.split(".")[0] == host.split(".")[0]))
    points = [m["path"].rstrip("/") or "/" for m in facts["mounts"]]
    for want in expect.get("mounts") or []:
        checks.append(check("share mounted at", want, "not mounted", (want.rstrip("/") or "/") in points))
    # The driver the seed installs: runcmd goes on past a failed install
    # (only its last command's status counts), so this is where it shows.
    want = expect.get("nvidia_driver")
    if want:
        got = sorted({g["driver_version"] for g in facts.get("gpus") or []})
        checks.append(check("NVIDIA driver", want, ", ".join(got) or "no GPU answered nvidia-smi", want in got))
    return checks


def facts():
    """What the guest has; each part on its own, so one that fails does not
    take the others with it."""
    f = {}
    for key, fn in (("links", sys_links), ("addresses", addresses), ("routes", routes),
                    ("dns", dns), ("mounts", mounts)):
        try:
            f[key] = fn()
        except Exception as e:  # a fact that cannot be read must not stop the report
            print("kohaku-report: reading %s: %s" % (key, type(e).__name__), file=sys.stderr)
            f[key] = None
    if f["links"] is None:
        f["links"] = {}
    if f["addresses"] is None:
        f["addresses"] = []
    if f["dns"] is None:
        f["dns"] = ([], [], "unreadable")
    if f["mounts"] is None:
        f["mounts"] = []
    f["hostname"] = HOSTNAME or socket.gethostname()
    return f


def verify(expect, f):
    try:
        return compare(expect, f)
    except Exception as e:  # the report goes out even when a check breaks
        return [check("declared configuration", "", "the check failed: %s" % type(e).__name__, None)]


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


def signed(cfg, report):
    """The report as posted: without the token (the URL names a one-way
    digest of it) and with an HMAC-SHA256 of the body under the token, so
    that someone who sees the post can neither reuse it for another body
    nor sign one of their own."""
    body = stamped({k: v for k, v in report.items() if k != "token"})
    key = cfg.get("token", "").encode()
    return body, "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def post(url, body, signature):
    try:
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "X-Kohaku-Signature": signature})
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


def save(body):
    try:
        os.makedirs(os.path.dirname(SAVED), mode=0o700, exist_ok=True)
        fd = os.open(SAVED + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(body + b"\n")
        os.replace(SAVED + ".tmp", SAVED)
    except OSError as e:
        print("kohaku-report: saving the report: %s" % type(e).__name__, file=sys.stderr)


def stamped(report):
    """The report as JSON, with "sent_at": the guest's clock now, RFC 3339
    in UTC to the microsecond. Each try stamps it anew, so the provider can
    tell how long the copy that got through took."""
    now = datetime.datetime.now(datetime.timezone.utc)
    report["sent_at"] = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return json.dumps(report).encode()


def deliver(cfg, report):
    # Try the channel every second (cheap: one open that fails at once while
    # the host is not reading) and post with backoff, until one gets through.
    url = cfg.get("url")
    if not url and not os.path.exists(PORT):
        print("kohaku-report: no URL and no channel: nowhere to report", file=sys.stderr)
        return False
    deadline = time.time() + float(os.environ.get("KOHAKU_REPORT_DEADLINE", 6 * 3600))
    next_post, delay = 0.0, 2
    while True:
        if os.path.exists(PORT) and write_port(stamped(report)):
            return True
        now = time.time()
        if url and now >= next_post:
            if post(url, *signed(cfg, report)):
                return True
            next_post, delay = now + delay, min(delay * 2, 60)
        if now > deadline:
            return False
        time.sleep(1)


def num(v):
    try:
        f = float(v)
    except ValueError:
        return None
    return f if f == f else None


GPU_FIELDS = "index,name,driver_version,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw"


def gpu_health():
    """Each GPU's load as nvidia-smi sees it; a value it cannot give is null."""
    out = run(NVIDIA_SMI, "--query-gpu=" + GPU_FIELDS, "--format=csv,noheader,nounits", timeout=FACT_TIMEOUT)
    found = []
    for line in out.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != 8:
            continue
        idx = num(cols[0])
        found.append({"index": int(idx) if idx is not None else len(found),
                      "name": cols[1][:MAX_TEXT], "driver_version": cols[2][:MAX_TEXT],
                      "utilization_percent": num(cols[3]), "memory_used_mib": num(cols[4]),
                      "memory_total_mib": num(cols[5]), "temperature_c": num(cols[6]),
                      "power_watts": num(cols[7])})
        if len(found) == MAX_GPUS:
            break
    return found


def meminfo():
    m = {"total_kib": 0, "available_kib": 0}
    for line in read(root("/proc/meminfo")).splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == "MemTotal:":
            m["total_kib"] = int(f[1])
        elif len(f) >= 2 and f[0] == "MemAvailable:":
            m["available_kib"] = int(f[1])
    return m


def cloud_init_state():
    """done, error (cloud-init finished with errors) or running."""
    try:
        v1 = json.loads(read(root("/run/cloud-init/result.json"))).get("v1") or {}
    except (ValueError, AttributeError):
        return "running"
    return "error" if v1.get("errors") else "done"


def heartbeat(seq, interval, started, instance):
    hb = {"kind": "heartbeat", "seq": seq, "time": round(time.time(), 3), "interval": interval,
          "instance_id": instance[:MAX_TEXT], "hostname": (HOSTNAME or socket.gethostname())[:MAX_TEXT]}
    parts = (
        ("uptime", lambda: float(read(root("/proc/uptime")).split()[0])),
        ("load", lambda: [float(v) for v in read(root("/proc/loadavg")).split()[:3]]),
        ("cpus", lambda: os.sysconf("SC_NPROCESSORS_ONLN")),
        ("memory", meminfo),
        ("disk", lambda: disk(root("/") if ROOT else "/")),
        ("cloud_init", cloud_init_state),
        ("gpus", gpu_health),
    )
    for key, fn in parts:
        try:
            hb[key] = fn()
        except Exception:  # a part that cannot be read is left out, the rest goes
            hb[key] = None
    hb["agent"] = {"cpu_seconds": round(time.process_time(), 3), "started": round(started, 3)}
    return hb


def disk(path):
    st = os.statvfs(path)
    return {"path": "/", "total_bytes": st.f_blocks * st.f_frsize, "free_bytes": st.f_bavail * st.f_frsize}


def write_all(fd, data):
    """Writes data without blocking; False when the port would block (the
    reader left or is slow: the heartbeat is dropped, and a later one
    starts with a newline that ends what was cut off)."""
    try:
        while data:
            data = data[os.write(fd, data):]
        return True
    except BlockingIOError:
        return False


def heartbeats(cfg, instance):
    """The agent: while a reader holds the channel open, a heartbeat at once
    and then every interval; nothing while nobody reads. The port is kept
    open; poll tells whether the host side is connected (a virtio-serial
    port with no reader polls as POLLHUP, a FIFO as POLLERR)."""
    try:
        interval = float(cfg.get("heartbeat") or 0)
    except (TypeError, ValueError):
        interval = 0
    if interval <= 0:
        return 0
    started = STARTED
    seq, fd, connected, due = 0, None, False, 0.0
    while True:
        if fd is None:
            try:
                fd = os.open(PORT, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                fd = None
        if fd is not None:
            p = select.poll()
            p.register(fd, select.POLLOUT)
            ev = p.poll(0)
            rev = ev[0][1] if ev else 0
            if rev & (select.POLLERR | select.POLLNVAL):
                os.close(fd)
                fd, connected = None, False
            elif rev & select.POLLHUP or not rev & select.POLLOUT:
                connected = False
            elif not connected or time.time() >= due:
                seq += 1
                body = json.dumps(heartbeat(seq, interval, started, instance), separators=(",", ":")).encode()
                try:
                    write_all(fd, b"\n" + body + b"\n")
                    connected = True
                except OSError:
                    os.close(fd)
                    fd, connected = None, False
                due = time.time() + interval
        time.sleep(TICK)


def main():
    try:
        cfg = json.loads(read(CONFIG))
    except ValueError:
        print("kohaku-report: no configuration", file=sys.stderr)
        return 1
    instance = read(INSTANCE_FILE).strip() or "unknown"
    stamp = os.path.join(STATE_DIR, "reported-" + instance.replace("/", "_"))
    if os.path.exists(stamp):
        return heartbeats(cfg, instance)
    status = cloud_init_status()
    f = facts()
    try:
        f["gpus"] = gpus()
    except Exception as e:  # the report goes out without them
        print("kohaku-report: reading gpus: %s" % type(e).__name__, file=sys.stderr)
        f["gpus"] = []
    report = {
        "token": cfg.get("token", ""),
        "instance_id": instance,
        # The domain and the boot that write the report, signed with it, so
        # that the provider takes it only for this VM and this boot.
        "domain_uuid": read("/sys/class/dmi/id/product_uuid").strip().lower(),
        "boot_id": read("/proc/sys/kernel/random/boot_id").strip().lower(),
        "hostname": f["hostname"],
        "fqdn": socket.getfqdn(),
        "host_keys": host_keys(),
        "addresses": f["addresses"],
        "routes": f["routes"] or [],
        "dns_servers": f["dns"][0],
        "checks": verify(cfg.get("expect") or {}, f),
        "cloud_init": status,
        "gpus": f["gpus"],
    }
    save(stamped(report))
    if not deliver(cfg, report):
        return 1
    os.makedirs(STATE_DIR, exist_ok=True)
    open(stamp, "w").close()
    return heartbeats(cfg, instance)


if __name__ == "__main__":
    sys.exit(main())
