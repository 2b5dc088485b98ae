package acctest

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// CLIVersion is the CLI the acceptance tests run (CLI()): which one and
// its version.
type CLIVersion struct {
	Name                string // "Terraform" or "OpenTofu"
	Major, Minor, Patch int
	Text                string // the first line of `version`, e.g. "Terraform v1.14.9"
}

// AtLeast reports whether the version is major.minor or later.
func (v CLIVersion) AtLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

var cliVersion struct {
	once sync.Once
	v    CLIVersion
	err  error
}

var cliVersionLine = regexp.MustCompile(`^(Terraform|OpenTofu) v(\d+)\.(\d+)\.(\d+)`)

// ReadCLIVersion runs `<CLI> version` once per test binary.
func ReadCLIVersion() (CLIVersion, error) {
	cliVersion.once.Do(func() {
		out, err := exec.Command(CLI(), "version").Output()
		if err != nil {
			cliVersion.err = fmt.Errorf("%s version: %w", CLI(), err)
			return
		}
		for _, line := range strings.Split(string(out), "\n") {
			m := cliVersionLine.FindStringSubmatch(strings.TrimSpace(line))
			if m == nil {
				continue
			}
			major, _ := strconv.Atoi(m[2])
			minor, _ := strconv.Atoi(m[3])
			patch, _ := strconv.Atoi(m[4])
			cliVersion.v = CLIVersion{Name: m[1], Major: major, Minor: minor, Patch: patch, Text: m[0]}
			return
		}
		cliVersion.err = fmt.Errorf("%s version printed no version line:\n%s", CLI(), out)
	})
	return cliVersion.v, cliVersion.err
}

// NeedTerraformAtLeast skips t, saying why, unless the CLI the tests run is
// Terraform (not OpenTofu) of major.minor or later; feature names what
// needs it. make testacc-tf114 runs these tests under a built Terraform
// (internal/acctest/terraform/terraform.sh).
func NeedTerraformAtLeast(t testing.TB, major, minor int, feature string) {
	t.Helper()
	Acceptance(t)
	v, err := ReadCLIVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "Terraform" || !v.AtLeast(major, minor) {
		t.Skipf("%s needs Terraform %d.%d or later; the CLI is %s (%s). Run it with make testacc-tf114.",
			feature, major, minor, v.Text, CLI())
	}
}
