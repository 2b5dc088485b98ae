// Command e2e is Kohaku's end-to-end benchmark. Against the local
// acceptance host it runs, for each N, terraform apply, a no-change
// terraform plan (full refresh) and terraform destroy of N kohaku_seed +
// N kohaku_vm (defined, not started; with -running, started tiny test
// guests, so a refresh also asks each guest's agent for its addresses),
// and beside them, in the same run and
// interleaved repeat by repeat:
//
//   - the same-schema floor: the same configuration through
//     internal/bench/schemafloor, a provider with Kohaku's exact schemas and
//     no-op CRUD (plan echoed into state), which is what Terraform, the
//     plugin protocol and the framework cost for these schemas;
//   - the Terraform floor: the same graph of 2N terraform_data resources,
//     which is what Terraform core costs by itself;
//   - the libvirt floor: internal/bench/floor, the libvirt calls the same
//     work needs at the least, made directly with the same concurrency.
//
// It prints wall times (min / median of the repeats), the provider's peak
// RSS, CPU split between Terraform+provider and libvirtd, the ratio
// kohaku / (same-schema floor + libvirt floor), the older ratio against the
// Terraform floor, and, from one extra untimed
// plan per N through a counting proxy in front of libvirtd's socket, the
// libvirt calls a refresh makes per VM and per seed.
//
// It builds the provider into a temporary directory, serves it with
// dev_overrides (no registry access), names everything it makes
// kohaku-bench-<pid>-..., and on exit, failure or Ctrl-C ends the
// processes it started (by process group id) and deletes every domain and
// volume under that prefix.
//
//	eval "$(bash internal/acctest/testhost/testhost.sh env)"
//	go run ./internal/bench/e2e -n 10,50,200 -repeats 3
//
// With -svg it also draws the wall times as a chart (internal/bench/chart).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/bench/chart"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

type options struct {
	ns          []int
	repeats     int
	parallelism int
	rpc         bool
	repo        string
	terraform   string
	out         string
	svg         string
	keep        bool
	profile     string
	rev         string
	host        hostEnv
	placed      bool
}

// measurement is one repeat of one N.
type measurement struct {
	N      int              `json:"n"`
	Repeat int              `json:"repeat"`
	Kohaku map[string]usage `json:"kohaku"`
	SF     map[string]usage `json:"same_schema_floor"`
	TF     map[string]usage `json:"terraform_floor"`
	LV     map[string]usage `json:"libvirt_floor"`
	Floor  *floorResult     `json:"libvirt_floor_detail"`
	RPCs   *rpcCount        `json:"refresh_rpcs,omitempty"`
	// StateBytes is the size of terraform.tfstate after apply, for kohaku
	// and for the same-schema floor.
	StateBytes, FloorStateBytes int64
}

// floorResult mirrors internal/bench/floor's output.
type floorResult struct {
	N          int     `json:"n"`
	CreateS    float64 `json:"create_s"`
	ReadS      float64 `json:"read_s"`
	DeleteS    float64 `json:"delete_s"`
	CreateRPCs int64   `json:"create_rpcs"`
	ReadRPCs   int64   `json:"read_rpcs"`
	DeleteRPCs int64   `json:"delete_rpcs"`
	ISOBytes   int     `json:"iso_bytes"`
}

var steps = []string{"apply", "plan", "destroy"}

func main() {
	var o options
	ns := flag.String("n", "10,50,200", "comma-separated numbers of seed + VM pairs")
	flag.IntVar(&o.repeats, "repeats", 3, "repeats of every figure (min and median are reported)")
	flag.IntVar(&o.parallelism, "parallelism", 10, "terraform -parallelism, and the libvirt floor's concurrency")
	flag.BoolVar(&o.rpc, "rpc", true, "count libvirt calls of one extra, untimed refresh per N through a counting proxy")
	flag.StringVar(&o.repo, "repo", ".", "repository root (the provider is built from its working tree)")
	flag.StringVar(&o.rev, "rev", "", "build from this git revision of -repo (git archive into the work directory) instead of the working tree")
	flag.StringVar(&o.terraform, "terraform", "terraform", "terraform CLI")
	flag.StringVar(&o.out, "out", "", "also write the report (markdown) to this file")
	flag.StringVar(&o.svg, "svg", "", "also write a chart of the wall times (SVG: seconds against N for kohaku and the same-schema and Terraform floors, per step) to this file")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (configs, states, logs)")
	flag.StringVar(&o.profile, "profile", "", "build internal/bench/profprovider instead and write each provider process's CPU and allocation profiles to this directory (timings then include profiling)")
	flag.StringVar(&o.host.URI, "uri", envOr("KOHAKU_URI", "qemu:///system"), "libvirt URI of the acceptance host (unix transport)")
	flag.StringVar(&o.host.Pool, "pool", envOr("KOHAKU_TEST_POOL", "kohaku-acc"), "pool for seeds and overlays")
	flag.StringVar(&o.host.ImagePool, "image-pool", envOr("KOHAKU_TEST_IMAGE_POOL", "kohaku-images"), "pool of the base image")
	flag.StringVar(&o.host.Base, "base", envOr("KOHAKU_TEST_BASE_VOLUME", "rootfs.qcow2"), "base image volume")
	flag.StringVar(&o.host.Kernel, "kernel", os.Getenv("KOHAKU_TEST_KERNEL"), "kernel for direct boot (KOHAKU_TEST_KERNEL)")
	flag.StringVar(&o.host.Initrd, "initrd", os.Getenv("KOHAKU_TEST_INITRD"), "initrd for direct boot (KOHAKU_TEST_INITRD)")
	flag.BoolVar(&o.placed, "placed", false, "instead of the main benchmark, apply each N of CPU-only VMs asking placement for a host against the same N naming it, counting the capacity reads through the proxy (needs -rpc)")
	flag.BoolVar(&o.host.Running, "running", false, "start the VMs, so a refresh also asks each guest's agent for its addresses: give -kernel and -initrd of the tiny test guest (KOHAKU_TEST_TINY_*), 96 MiB each; the libvirt floor still only defines them")
	flag.Parse()
	var err error
	if o.ns, err = parseInts(*ns); err != nil {
		fatal(err)
	}
	if o.repeats < 1 || o.parallelism < 1 {
		fatal(errors.New("-repeats and -parallelism must be at least 1"))
	}
	if o.host.Kernel == "" || o.host.Initrd == "" {
		fatal(errors.New("-kernel and -initrd are required: eval \"$(bash internal/acctest/testhost/testhost.sh env)\" first"))
	}
	os.Exit(run(o))
}

func run(o options) (rc int) {
	prefix := fmt.Sprintf("kohaku-bench-%d-", os.Getpid())
	work, err := os.MkdirTemp("", "kohaku-bench-")
	if err != nil {
		fatal(err)
	}
	r := &runner{}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		for s := range sigs {
			fmt.Fprintf(os.Stderr, "\ne2e: %v: stopping the running command, then removing everything under %s\n", s, prefix)
			grace := 20 * time.Second
			if r.stopped() {
				grace = 0 // a second signal: no more patience
			}
			r.stop(grace)
		}
	}()
	defer func() {
		if left := sweep(o.host, prefix); left != "" {
			fmt.Fprintln(os.Stderr, "e2e:", left)
			rc = 1
		}
		if o.keep {
			fmt.Fprintln(os.Stderr, "e2e: work directory kept:", work)
		} else {
			os.RemoveAll(work)
		}
	}()

	h := &harness{o: o, r: r, prefix: prefix, work: work}
	if err := h.setup(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		rc = 1
		return rc
	}
	if o.placed {
		return h.runPlaced()
	}
	ms, err := h.measureAll()
	if len(ms) > 0 {
		report := h.report(ms)
		fmt.Print(report)
		if o.out != "" {
			if werr := os.WriteFile(o.out, []byte(report), 0o644); werr != nil {
				fmt.Fprintln(os.Stderr, "e2e:", werr)
			}
		}
		if o.svg != "" {
			if werr := writeChart(o.svg, report); werr != nil {
				fmt.Fprintln(os.Stderr, "e2e: chart:", werr)
			}
		}
		raw, _ := json.MarshalIndent(ms, "", "  ")
		os.WriteFile(filepath.Join(work, "results.json"), raw, 0o644) //nolint:errcheck // kept only with -keep
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		rc = 1
	}
	return rc
}

type harness struct {
	o      options
	r      *runner
	prefix string
	work   string

	providerDir, providerExe, floorExe string
	env                                []string
	// The same-schema floor: its provider binary and the CLI settings that
	// serve it under Kohaku's address.
	schemaExe string
	schemaEnv []string
	proxy     *countingProxy
	proxyURI  string
}

func (h *harness) setup() error {
	h.providerDir = filepath.Join(h.work, "plugins")
	h.providerExe = filepath.Join(h.providerDir, "terraform-provider-kohaku")
	h.floorExe = filepath.Join(h.work, "floor")
	logp := filepath.Join(h.work, "build.log")
	fmt.Fprintf(os.Stderr, "e2e: building the provider and the libvirt floor into %s\n", h.work)
	src := h.o.repo
	if h.o.rev != "" {
		src = filepath.Join(h.work, "src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		archive := fmt.Sprintf("git -C %q archive --format=tar %q | tar -x -C %q", h.o.repo, h.o.rev, src)
		if _, _, err := h.r.run(h.o.repo, logp, nil, "", []string{"bash", "-o", "pipefail", "-c", archive}); err != nil {
			return err
		}
	}
	provider := "."
	if h.o.profile != "" {
		provider = "./internal/bench/profprovider"
		abs, err := filepath.Abs(h.o.profile)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return err
		}
		h.o.profile = abs
	}
	schemaDir := filepath.Join(h.work, "schema-plugins")
	h.schemaExe = filepath.Join(schemaDir, "terraform-provider-kohaku")
	for _, b := range [][]string{
		{"go", "build", "-o", h.providerExe, provider},
		{"go", "build", "-o", h.floorExe, "./internal/bench/floor"},
		{"go", "build", "-o", h.schemaExe, "./internal/bench/schemafloor"},
	} {
		if _, _, err := h.r.run(src, logp, nil, "", b); err != nil {
			return err
		}
	}
	rc := filepath.Join(h.work, "terraformrc")
	if err := writeFile(rc, cliConfig(h.providerDir)); err != nil {
		return err
	}
	h.env = []string{"TF_CLI_CONFIG_FILE=" + rc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1", "TF_INPUT=0", "TF_LOG=", "TF_LOG_PROVIDER="}
	schemaRC := filepath.Join(h.work, "terraformrc-schema")
	if err := writeFile(schemaRC, cliConfig(schemaDir)); err != nil {
		return err
	}
	h.schemaEnv = append([]string{"TF_CLI_CONFIG_FILE=" + schemaRC}, h.env[1:]...)
	if h.o.profile != "" {
		h.env = append(h.env, "KOHAKU_BENCH_PROFILE_DIR="+h.o.profile)
	}
	if h.o.rpc {
		ep, err := hostconn.ParseURI(h.o.host.URI)
		if err != nil {
			return err
		}
		if ep.Transport != virt.TransportUnix || ep.Socket == "" {
			fmt.Fprintf(os.Stderr, "e2e: %s is not a local unix socket; not counting RPCs\n", h.o.host.URI)
			h.o.rpc = false
		} else {
			sock := filepath.Join(h.work, "libvirt-proxy.sock")
			if h.proxy, err = startProxy(sock, ep.Socket); err != nil {
				return err
			}
			h.proxyURI = strings.SplitN(ep.Name, "?", 2)[0] + "?socket=" + sock
		}
	}
	// Warm-up, untimed: one pair through apply and destroy, which also
	// checks the setup before the long runs.
	fmt.Fprintln(os.Stderr, "e2e: warm-up (N=1)")
	dir := filepath.Join(h.work, "warmup")
	if err := writeFile(filepath.Join(dir, "main.tf"), kohakuConfig(h.o.host, h.prefix+"w-", 1)); err != nil {
		return err
	}
	for _, s := range []string{"apply", "destroy"} {
		if _, _, err := h.tf(dir, s, nil, false); err != nil {
			return err
		}
	}
	return nil
}

// tf runs one terraform step in dir with the real provider. plan must find
// no change.
func (h *harness) tf(dir, step string, extra []string, sample bool) (usage, int, error) {
	exe := ""
	if sample {
		exe = h.providerExe
	}
	return h.tfWith(h.env, exe, dir, step, extra)
}

// tfWith runs one terraform step in dir with the CLI settings env,
// sampling the provider processes of exe when it is set.
func (h *harness) tfWith(env []string, exe, dir, step string, extra []string) (usage, int, error) {
	argv := []string{h.o.terraform}
	var ok []int
	switch step {
	case "apply", "destroy":
		argv = append(argv, step, "-auto-approve")
	case "plan":
		argv = append(argv, "plan", "-detailed-exitcode")
		ok = []int{2}
	}
	argv = append(argv, "-input=false", "-no-color", fmt.Sprintf("-parallelism=%d", h.o.parallelism))
	argv = append(argv, extra...)
	u, code, err := h.r.run(dir, filepath.Join(dir, "terraform.log"), env, exe, argv, ok...)
	if err == nil && step == "plan" && code == 2 {
		err = fmt.Errorf("terraform plan in %s found changes right after apply; see %s", dir, filepath.Join(dir, "terraform.log"))
	}
	return u, code, err
}

func (h *harness) measureAll() ([]measurement, error) {
	var out []measurement
	for _, n := range h.o.ns {
		for rep := 1; rep <= h.o.repeats; rep++ {
			m, err := h.measure(n, rep, rep == h.o.repeats)
			if err != nil {
				return out, fmt.Errorf("with N=%d, repeat %d: %w", n, rep, err)
			}
			out = append(out, m)
		}
	}
	return out, nil
}

func (h *harness) measure(n, rep int, last bool) (measurement, error) {
	m := measurement{N: n, Repeat: rep, Kohaku: map[string]usage{}, SF: map[string]usage{}, TF: map[string]usage{}, LV: map[string]usage{}}
	tag := fmt.Sprintf("n%dr%d", n, rep)
	fmt.Fprintf(os.Stderr, "e2e: N=%d repeat %d/%d: kohaku", n, rep, h.o.repeats)

	kdir := filepath.Join(h.work, "k"+tag)
	if err := writeFile(filepath.Join(kdir, "main.tf"), kohakuConfig(h.o.host, h.prefix+"k"+tag+"-", n)); err != nil {
		return m, err
	}
	for _, s := range steps {
		if s == "destroy" && last && h.o.rpc {
			// One more refresh, untimed, through the counting proxy.
			h.proxy.reset()
			if _, _, err := h.tf(kdir, "plan", []string{"-var", "uri=" + h.proxyURI}, false); err != nil {
				return m, err
			}
			c := h.proxy.snapshot()
			m.RPCs = &c
		}
		u, _, err := h.tf(kdir, s, nil, true)
		if err != nil {
			return m, err
		}
		m.Kohaku[s] = u
		if s == "apply" {
			m.StateBytes = fileSize(filepath.Join(kdir, "terraform.tfstate"))
		}
		fmt.Fprintf(os.Stderr, " %s %.1fs", s, u.Wall)
	}

	fmt.Fprint(os.Stderr, "; same-schema floor")
	sdir := filepath.Join(h.work, "s"+tag)
	if err := writeFile(filepath.Join(sdir, "main.tf"), kohakuConfig(h.o.host, h.prefix+"s"+tag+"-", n)); err != nil {
		return m, err
	}
	for _, s := range steps {
		u, _, err := h.tfWith(h.schemaEnv, h.schemaExe, sdir, s, nil)
		if err != nil {
			return m, err
		}
		m.SF[s] = u
		if s == "apply" {
			m.FloorStateBytes = fileSize(filepath.Join(sdir, "terraform.tfstate"))
		}
		fmt.Fprintf(os.Stderr, " %s %.1fs", s, u.Wall)
	}

	fmt.Fprint(os.Stderr, "; terraform floor")
	tdir := filepath.Join(h.work, "t"+tag)
	if err := writeFile(filepath.Join(tdir, "main.tf"), terraformFloorConfig(n)); err != nil {
		return m, err
	}
	for _, s := range steps {
		u, _, err := h.tf(tdir, s, nil, false)
		if err != nil {
			return m, err
		}
		m.TF[s] = u
		fmt.Fprintf(os.Stderr, " %s %.1fs", s, u.Wall)
	}

	fmt.Fprint(os.Stderr, "; libvirt floor")
	ldir := filepath.Join(h.work, "l"+tag)
	if err := os.MkdirAll(ldir, 0o755); err != nil {
		return m, err
	}
	outp := filepath.Join(ldir, "floor.json")
	argv := []string{h.floorExe, "-out", outp,
		"-uri", h.o.host.URI, "-pool", h.o.host.Pool, "-image-pool", h.o.host.ImagePool, "-base", h.o.host.Base,
		"-kernel", h.o.host.Kernel, "-initrd", h.o.host.Initrd, "-prefix", h.prefix + "f" + tag + "-",
		"-n", fmt.Sprint(n), "-concurrency", fmt.Sprint(h.o.parallelism)}
	u, _, err := h.r.run(ldir, filepath.Join(ldir, "floor.log"), nil, "", argv)
	if err != nil {
		return m, err
	}
	raw, err := os.ReadFile(outp)
	if err != nil {
		return m, err
	}
	var fr floorResult
	if err := json.Unmarshal(raw, &fr); err != nil {
		return m, fmt.Errorf("floor output %q: %w", raw, err)
	}
	m.Floor = &fr
	// The floor's CPU and libvirtd CPU are for the whole process; they are
	// split over the phases in proportion to wall time.
	total := fr.CreateS + fr.ReadS + fr.DeleteS
	for s, secs := range map[string]float64{"apply": fr.CreateS, "plan": fr.ReadS, "destroy": fr.DeleteS} {
		share := 0.0
		if total > 0 {
			share = secs / total
		}
		m.LV[s] = usage{Wall: secs, ChildCPU: u.ChildCPU * share, DaemonCPU: u.DaemonCPU * share}
	}
	fmt.Fprintf(os.Stderr, " %.2fs %.2fs %.2fs\n", fr.CreateS, fr.ReadS, fr.DeleteS)
	if left := h.leftovers(h.prefix + "k" + tag + "-"); left != "" {
		return m, fmt.Errorf("terraform destroy left %s", left)
	}
	return m, nil
}

// leftovers names domains and volumes under prefix that still exist.
func (h *harness) leftovers(prefix string) string {
	doms, vols, err := listPrefix(h.o.host, prefix)
	if err != nil {
		return err.Error()
	}
	if len(doms)+len(vols) == 0 {
		return ""
	}
	return fmt.Sprintf("domains %v and volumes %v", doms, vols)
}

func listPrefix(hst hostEnv, prefix string) (doms, vols []string, err error) {
	c, err := virt.New(virt.Settings{URI: hst.URI})
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ds, err := c.ListDomains(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range ds {
		if strings.HasPrefix(d.Name, prefix) {
			doms = append(doms, d.Name)
		}
	}
	names, err := c.ListVolumeNames(ctx, hst.Pool)
	if err != nil {
		return doms, nil, err
	}
	for _, v := range names {
		if strings.HasPrefix(v, prefix) {
			vols = append(vols, v)
		}
	}
	return doms, vols, nil
}

// sweep removes every domain and volume under prefix. It returns a note
// when it found something (after a clean run it finds nothing) or failed.
func sweep(hst hostEnv, prefix string) string {
	c, err := virt.New(virt.Settings{URI: hst.URI})
	if err != nil {
		return "cleanup: " + err.Error()
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var notes, failed []string
	ds, err := c.ListDomains(ctx)
	if err != nil {
		return "cleanup: listing domains: " + err.Error()
	}
	for _, d := range ds {
		if !strings.HasPrefix(d.Name, prefix) {
			continue
		}
		if _, err := c.StopDomain(ctx, d.DomainRef, 0); err != nil {
			failed = append(failed, fmt.Sprintf("stop %s: %v", d.Name, err))
		}
		if err := c.UndefineDomain(ctx, d.DomainRef); err != nil {
			failed = append(failed, fmt.Sprintf("undefine %s: %v", d.Name, err))
			continue
		}
		notes = append(notes, "domain "+d.Name)
	}
	names, err := c.ListVolumeNames(ctx, hst.Pool)
	if err != nil {
		failed = append(failed, "listing volumes: "+err.Error())
	}
	for _, v := range names {
		if !strings.HasPrefix(v, prefix) {
			continue
		}
		if err := c.RemoveVolume(ctx, hst.Pool, v); err != nil {
			failed = append(failed, fmt.Sprintf("delete %s/%s: %v", hst.Pool, v, err))
			continue
		}
		notes = append(notes, "volume "+hst.Pool+"/"+v)
	}
	var msg []string
	if len(notes) > 0 {
		shown := notes
		if len(shown) > 6 {
			shown = append(shown[:6:6], fmt.Sprintf("... (%d more)", len(notes)-6))
		}
		msg = append(msg, fmt.Sprintf("cleanup removed %d leftovers: %s", len(notes), strings.Join(shown, ", ")))
	}
	if len(failed) > 0 {
		msg = append(msg, "cleanup FAILED for: "+strings.Join(failed, "; "))
	}
	return strings.Join(msg, "\n")
}

// report formats the tables.
func (h *harness) report(ms []measurement) string {
	var b strings.Builder
	load, _ := os.ReadFile("/proc/loadavg")
	vms := "defined, not started"
	if h.o.host.Running {
		vms = "running tiny test guests"
	}
	fmt.Fprintf(&b, "Kohaku end-to-end benchmark: N = %s pairs (kohaku_seed + kohaku_vm, %s), %d repeat(s), -parallelism=%d; %d CPUs, load %s; %s\n\n",
		joinInts(h.o.ns), vms, h.o.repeats, h.o.parallelism, runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:3], " "), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	b.WriteString("Wall seconds, min / median of the repeats. Ratio = kohaku / (same-schema floor + libvirt " +
		"floor), from medians (from minimums in parentheses); target ≤ 1.3. The same-schema floor is Kohaku's " +
		"schemas with no-op CRUD (internal/bench/schemafloor): Terraform, the plugin protocol and the framework " +
		"for these schemas. \"vs tf floor\" is kohaku / (terraform floor + libvirt floor), the ratio of earlier " +
		"reports.\n\n")
	b.WriteString("| N | step | kohaku | same-schema floor | terraform floor | libvirt floor | ratio | ≤ 1.3 | " +
		"vs tf floor | peak RSS (MiB): kohaku / floor |\n|---:|---|---:|---:|---:|---:|---:|:---:|---:|---:|\n")
	byN := map[int][]measurement{}
	for _, m := range ms {
		byN[m.N] = append(byN[m.N], m)
	}
	ns := sortedKeys(byN)
	type cpuRow struct {
		n                              int
		step                           string
		kt, kp, kd, st, sp, tt, lc, ld float64
	}
	var cpus []cpuRow
	for _, n := range ns {
		group := byN[n]
		for _, s := range steps {
			k := collect(group, func(m measurement) usage { return m.Kohaku[s] })
			sf := collect(group, func(m measurement) usage { return m.SF[s] })
			t := collect(group, func(m measurement) usage { return m.TF[s] })
			l := collect(group, func(m measurement) usage { return m.LV[s] })
			kw, sw, tw, lw := walls(k), walls(sf), walls(t), walls(l)
			ratio := median(kw) / (median(sw) + median(lw))
			rmin := minf(kw) / (minf(sw) + minf(lw))
			rtf := median(kw) / (median(tw) + median(lw))
			met := "yes"
			if ratio > 1.3 {
				met = "no"
			}
			rss := func(us []usage) float64 {
				return median(field(us, func(u usage) float64 { return float64(u.ProviderRSSKiB) / 1024 }))
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %.2f (%.2f) | %s | %.2f | %.0f / %.0f |\n", n, s, mm(kw), mm(sw), mm(tw), mm(lw), ratio, rmin, met, rtf, rss(k), rss(sf))
			cpus = append(cpus, cpuRow{n, s,
				median(field(k, func(u usage) float64 { return u.ChildCPU })),
				median(field(k, func(u usage) float64 { return u.ProviderCPU })),
				median(field(k, func(u usage) float64 { return u.DaemonCPU })),
				median(field(sf, func(u usage) float64 { return u.ChildCPU })),
				median(field(sf, func(u usage) float64 { return u.ProviderCPU })),
				median(field(t, func(u usage) float64 { return u.ChildCPU })),
				median(field(l, func(u usage) float64 { return u.ChildCPU })),
				median(field(l, func(u usage) float64 { return u.DaemonCPU })),
			})
		}
	}
	b.WriteString("\nCPU seconds (medians): where the time goes. \"terraform + provider\" is the terraform " +
		"process with the providers it reaped; \"provider\" is the provider processes alone (sampled from " +
		"/proc); libvirtd includes the qemu-img it runs. The libvirt floor's CPU is split over its phases by " +
		"wall time.\n\n")
	b.WriteString("| N | step | kohaku: terraform + provider | of which provider | libvirtd | same-schema " +
		"floor: terraform + provider | of which provider | terraform floor | libvirt floor: client | libvirt " +
		"floor: libvirtd |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range cpus {
		fmt.Fprintf(&b, "| %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", c.n, c.step, c.kt, c.kp, c.kd, c.st, c.sp, c.tt, c.lc, c.ld)
	}
	b.WriteString("\nState after apply (terraform.tfstate), bytes per seed + VM pair: kohaku against the " +
		"same-schema floor, whose state holds what the plan knew (the configuration and defaults; computed " +
		"values null).\n\n| N | kohaku | same-schema floor |\n|---:|---:|---:|\n")
	for _, n := range ns {
		m := byN[n][len(byN[n])-1]
		fmt.Fprintf(&b, "| %d | %d | %d |\n", n, m.StateBytes/int64(n), m.FloorStateBytes/int64(n))
	}
	if h.o.rpc {
		b.WriteString("\nlibvirt calls of one no-change plan (full refresh), counted by a proxy in front of " +
			"libvirtd's socket. Per VM: domain calls / N; per seed: storage calls / N; the libvirt floor's read " +
			"makes 2 per VM and 3 per seed. KiB from libvirtd: every reply and download stream byte of the " +
			"refresh, per seed + VM pair (the seed's ISO read is most of it).\n\n")
		b.WriteString("| N | calls | connections | per VM | per seed | connection setup | KiB from libvirtd per pair | per pair, by procedure |\n|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, n := range ns {
			for _, m := range byN[n] {
				if m.RPCs == nil {
					continue
				}
				var dom, sto, con int64
				for p, c := range m.RPCs.ByProc {
					switch kind(p) {
					case "domain":
						dom += c
					case "storage":
						sto += c
					default:
						con += c
					}
				}
				fmt.Fprintf(&b, "| %d | %d | %d | %.2f | %.2f | %d | %.1f | %s |\n", n, m.RPCs.Total, m.RPCs.Conns, float64(dom)/float64(n), float64(sto)/float64(n), con, float64(m.RPCs.Down)/1024/float64(n), m.RPCs.breakdown(n))
			}
		}
	}
	return b.String()
}

// writeChart draws the report's wall-time table into an SVG file.
func writeChart(path, report string) error {
	panels, err := chart.FromMarkdown(report)
	if err != nil {
		return err
	}
	var b strings.Builder
	if err := chart.WriteSVG(&b, chart.DefaultTitle, panels); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// fileSize is the size of the file at p, 0 when it cannot be read.
func fileSize(p string) int64 {
	if fi, err := os.Stat(p); err == nil {
		return fi.Size()
	}
	return 0
}

func collect(ms []measurement, f func(measurement) usage) []usage {
	var out []usage
	for _, m := range ms {
		out = append(out, f(m))
	}
	return out
}

func walls(us []usage) []float64 { return field(us, func(u usage) float64 { return u.Wall }) }

func field(us []usage, f func(usage) float64) []float64 {
	var out []float64
	for _, u := range us {
		out = append(out, f(u))
	}
	return out
}

func mm(xs []float64) string {
	if len(xs) == 1 {
		return fmt.Sprintf("%.2f", xs[0])
	}
	return fmt.Sprintf("%.2f / %.2f", minf(xs), median(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func minf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}

func sortedKeys(m map[int][]measurement) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

func joinInts(xs []int) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, ", ")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "e2e:", err)
	os.Exit(2)
}

// runPlaced is the placement benchmark (-placed).
func (h *harness) runPlaced() int {
	if h.proxy == nil {
		fmt.Fprintln(os.Stderr, "e2e: -placed counts capacity reads through the proxy: it needs -rpc and a unix socket URI")
		return 1
	}
	var rs []placedResult
	for _, n := range h.o.ns {
		r, err := h.measurePlaced(n)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		rs = append(rs, r)
	}
	report := placedReport(rs, h.o.parallelism)
	fmt.Print(report)
	if h.o.out != "" {
		if err := os.WriteFile(h.o.out, []byte(report), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
	}
	return 0
}
