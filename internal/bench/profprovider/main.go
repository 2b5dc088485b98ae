// Command profprovider serves the Kohaku provider like the real binary and,
// when KOHAKU_BENCH_PROFILE_DIR is set, writes a CPU profile and a heap
// profile per provider process there (cpu-<pid>.pprof, heap-<pid>.pprof)
// when Terraform shuts it down. The end-to-end harness builds it in place
// of the provider with -profile; merge the profiles with
// go tool pprof -top <binary> <dir>/cpu-*.pprof. KOHAKU_BENCH_GOGC sets the
// provider's GC percentage (to try GC settings without touching GOGC of
// terraform itself).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strconv"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts/libvirthost"
	"github.com/kohaku/terraform-provider-kohaku/internal/provider"
)

func main() {
	if v, err := strconv.Atoi(os.Getenv("KOHAKU_BENCH_GOGC")); err == nil {
		debug.SetGCPercent(v)
	}
	dir := os.Getenv("KOHAKU_BENCH_PROFILE_DIR")
	if dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", os.Getpid())))
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
			if h, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%d.pprof", os.Getpid()))); err == nil {
				pprof.Lookup("allocs").WriteTo(h, 0) //nolint:errcheck // best effort
				h.Close()
			}
		}()
	}
	// As main.quietLogs: Terraform shows no provider logs without these.
	if os.Getenv("TF_LOG") == "" && os.Getenv("TF_LOG_PROVIDER") == "" {
		for _, k := range []string{"TF_LOG_SDK", "TF_LOG_PROVIDER_KOHAKU"} {
			if _, set := os.LookupEnv(k); !set {
				os.Setenv(k, "OFF")
			}
		}
	}
	err := providerserver.Serve(context.Background(), provider.New("bench", libvirthost.Connect), providerserver.ServeOpts{
		Address: "registry.terraform.io/kohaku/kohaku",
	})
	if err != nil {
		log.Print(err.Error())
	}
}
