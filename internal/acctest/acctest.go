// Package acctest holds what Kohaku's acceptance tests share: the environment
// the throwaway test host exports, and short-lived helper servers (an sshd on
// loopback) that tests start and stop by PID.
package acctest

import (
	"os"
	"testing"
)

// Env returns an environment variable the acceptance host script exports
// (internal/acctest/testhost/testhost.sh env), or fails the test with how to
// get it: under TF_ACC a missing host is a failure, not a skip. Without
// TF_ACC (make test) acceptance tests skip, as terraform-plugin-testing does.
func Env(t testing.TB, name string) string {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 (make testacc) to run it against the local libvirt host")
	}
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: bring the acceptance host up and load its settings with\n"+
			"  bash internal/acctest/testhost/testhost.sh up && eval \"$(bash "+
			"internal/acctest/testhost/testhost.sh env)\"\n(or run make testacc, which does both)", name)
	}
	return v
}

// URI is the default libvirt URI of the acceptance host.
func URI(t testing.TB) string { return Env(t, "KOHAKU_URI") }
