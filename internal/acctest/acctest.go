// Package acctest holds what Kohaku's acceptance tests share, in every
// package that has them: the environment the throwaway test host exports,
// the VM test environment and virsh as an independent judge of the host,
// Terraform CLI workspaces that end in a "host == state" check, and
// short-lived helper servers (an sshd on loopback) that tests start and stop
// by PID. It imports no Kohaku package that has acceptance tests of its own
// (internal/virt in particular), so those packages' tests can use it.
//
// The convention: an acceptance test lives in a file ending _acc_test.go,
// needs TF_ACC=1 and the test host (make testacc brings both), and skips
// without TF_ACC. Every test in any other _test.go file is a unit test that
// needs no host (make test); .ci/check-test-convention enforces the split.
package acctest

import (
	"os"
	"testing"
)

// Acceptance marks t as an acceptance test: without TF_ACC it skips, as
// terraform-plugin-testing's resource.Test does. Tests that read host
// settings call Env or URI instead, which do this first.
func Acceptance(t testing.TB) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 (make testacc) to run it against the local libvirt host")
	}
}

// Env returns an environment variable the acceptance host script exports
// (internal/acctest/testhost/testhost.sh env), or fails the test with how to
// get it: under TF_ACC a missing host is a failure, not a skip. Without
// TF_ACC (make test) acceptance tests skip, as terraform-plugin-testing does.
func Env(t testing.TB, name string) string {
	t.Helper()
	Acceptance(t)
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
