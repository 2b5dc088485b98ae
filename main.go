// Command terraform-provider-kohaku serves the Kohaku Terraform provider.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"runtime/debug"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts/libvirthost"
	"github.com/kohaku/terraform-provider-kohaku/internal/provider"
)

// version is set by the release build (-ldflags "-X main.version=...").
var version = "dev"

//go:generate go run github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs generate --provider-name kohaku

func main() {
	var debugMode bool
	flag.BoolVar(&debugMode, "debug", false, "run the provider with support for debuggers like delve")
	flag.Parse()
	if !debugMode { // under -debug the logs go to this process's own stderr
		quietLogs()
	}
	gcSettings()

	err := providerserver.Serve(context.Background(), provider.New(version, libvirthost.Connect), providerserver.ServeOpts{
		Address: "registry.terraform.io/kohaku/kohaku",
		Debug:   debugMode,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}

// quietLogs turns the plugin SDK's and the provider's loggers off when
// Terraform will not show what they write. Terraform shows provider logs only
// with TF_LOG or TF_LOG_PROVIDER set, yet these loggers default to TRACE, so
// the provider would format every trace line of the framework as JSON for
// Terraform to parse and drop: about a fifth of the provider's CPU in the
// end-to-end benchmark (internal/bench/e2e). Levels set explicitly win.
func quietLogs() {
	if os.Getenv("TF_LOG") != "" || os.Getenv("TF_LOG_PROVIDER") != "" {
		return
	}
	for _, k := range []string{"TF_LOG_SDK", "TF_LOG_PROVIDER_KOHAKU"} {
		if _, set := os.LookupEnv(k); !set {
			os.Setenv(k, "OFF")
		}
	}
}

// Garbage collection settings, unless GOGC or GOMEMLIMIT say otherwise.
const (
	gcPercent   = 400       // collect at 5x the live heap, not 2x
	memoryLimit = 128 << 20 // and sooner as the heap nears 128 MiB
)

// gcSettings paces the collector by a memory limit rather than by heap
// growth alone. The provider's live heap is small, but it allocates a great
// deal of short-lived garbage converting values against its schemas, so the
// default pacing (GOGC=100) collects over and over. At 400 it collects a
// fifth as often, and the limit bounds what that costs in memory: the
// collector runs as the heap nears it. For 200 seeds + VMs this took the
// provider's CPU to 0.65-0.70x for apply, plan and destroy at 1.5-1.9x the
// peak RSS (70-93 MiB to 132-144 MiB); a 256 MiB limit saved no more CPU
// and took 250 MiB (README, "Performance").
func gcSettings() {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return
	}
	debug.SetGCPercent(gcPercent)
	debug.SetMemoryLimit(memoryLimit)
}
