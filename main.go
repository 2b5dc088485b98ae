// Command terraform-provider-kohaku serves the Kohaku Terraform provider.
package main

import (
	"context"
	"flag"
	"log"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/kohaku/terraform-provider-kohaku/internal/provider"
)

// version is set by the release build (-ldflags "-X main.version=...").
var version = "dev"

//go:generate go run github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs generate --provider-name kohaku

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run the provider with support for debuggers like delve")
	flag.Parse()
	if !debug { // under -debug the logs go to this process's own stderr
		quietLogs()
	}

	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: "registry.terraform.io/kohaku/kohaku",
		Debug:   debug,
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
			os.Setenv(k, "OFF") //nolint:errcheck // cannot fail for these names
		}
	}
}
