package provider

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// The plans a user reads are the human-readable ones, so this test reads
// them: the quick start, planned by the real CLI against the provider built
// from this tree, shows the resources and the attributes that have a value,
// and nothing else. No empty strings, no "(sensitive value)" for a value that
// is not there, no "will be marked as sensitive" notice, in the create plan,
// in the plan once the seed exists, and in the destroy plan.
func TestAccQuickstart_plansShowOnlyWhatChanges(t *testing.T) {
	uri := acctest.URI(t)
	// The example reads the user's public key from a file; any key will do
	// for a plan.
	key := filepath.Join(t.TempDir(), "id_ed25519.pub")
	writeFile(t, key, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJfaz/mJ/6BFYscLuJLZ6JlVggOhzDZ+dRREhnzJc1sZ you@laptop\n")
	vars := []string{
		"TF_VAR_ssh_public_key_file=" + key,
		"TF_VAR_network=" + acctest.Env(t, "KOHAKU_QUICKSTART_NETWORK"),
		"TF_VAR_uri=" + uri,
		"TF_VAR_pool=" + acctest.Env(t, "KOHAKU_TEST_POOL"),
		"TF_VAR_image_url=" + acctest.Env(t, "KOHAKU_TEST_CLOUD_IMAGE_URL"),
		"TF_VAR_image_checksum_url=" + acctest.Env(t, "KOHAKU_TEST_CLOUD_IMAGE_SUMS"),
		// The image cache of the run, not the user's.
		"KOHAKU_IMAGE_CACHE_DIR=" + t.TempDir(),
	}
	cli := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if cli == "" {
		var err error
		if cli, err = exec.LookPath("terraform"); err != nil {
			t.Fatalf("no terraform on PATH and no TF_ACC_TERRAFORM_PATH: %v", err)
		}
	}

	// The provider as users get it: a binary of this tree, served to the CLI
	// by a dev_overrides block, and the example copied out of the tree.
	bin, work := t.TempDir(), t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "terraform-provider-kohaku"), ".")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the provider: %v\n%s", err, out)
	}
	rc := filepath.Join(bin, "cli.tfrc")
	writeFile(t, rc, `provider_installation {
  dev_overrides {
    "kohaku/kohaku" = "`+bin+`"
  }
  direct {}
}
`)
	src := filepath.Join("..", "..", "examples", "quickstart")
	tfs, _ := filepath.Glob(filepath.Join(src, "*.tf"))
	if len(tfs) == 0 {
		t.Fatalf("no .tf files in %s", src)
	}
	for _, f := range tfs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(work, filepath.Base(f)), string(b))
	}

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir = work
		cmd.Env = append(append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1"), vars...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s\n%s", filepath.Base(cli), strings.Join(args, " "), err, out.String(), errOut.String())
		}
		return out.String()
	}
	t.Cleanup(func() {
		cmd := exec.Command(cli, "destroy", "-auto-approve", "-input=false", "-no-color")
		cmd.Dir = work
		cmd.Env = append(append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1"), vars...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("destroy: %v\n%s", err, out)
		}
	})

	create := run("plan", "-no-color", "-input=false")
	checkQuietPlan(t, "create plan", create)
	if !strings.Contains(create, "Plan: 3 to add, 0 to change, 0 to destroy.") {
		t.Errorf("create plan: want 3 to add, got:\n%s", create)
	}
	for _, want := range []string{"kohaku_image.debian12 will be created", "kohaku_seed.quickstart will be created", "kohaku_vm.quickstart will be created", "user_data_sha256", "rendered_network_config"} {
		if !strings.Contains(create, want) {
			t.Errorf("create plan does not show %q:\n%s", want, create)
		}
	}
	// The image's id is known before it exists, so the VM's disk shows it
	// (and is checked against the VM's host at plan time).
	if re := regexp.MustCompile(`\+ image\s+= "` + regexp.QuoteMeta(acctest.Env(t, "KOHAKU_TEST_POOL")+"/quickstart-debian-12.qcow2") + `"`); !re.MatchString(create) {
		t.Errorf("create plan does not show the VM's disk.image (%s):\n%s", re, create)
	}

	// The image and the seed (no guest boot): the next plan adds the VM and
	// shows nothing of them; the destroy plan lists their values only.
	run("apply", "-auto-approve", "-input=false", "-no-color", "-target=kohaku_seed.quickstart", "-target=kohaku_image.debian12")
	next := run("plan", "-no-color", "-input=false")
	checkQuietPlan(t, "plan after the seed and the image", next)
	if !strings.Contains(next, "Plan: 1 to add, 0 to change, 0 to destroy.") || strings.Contains(next, "kohaku_seed.quickstart will be") || strings.Contains(next, "kohaku_image.debian12 will be") {
		t.Errorf("plan after the seed and the image: want only the VM to add, got:\n%s", next)
	}
	destroy := run("plan", "-destroy", "-no-color", "-input=false")
	checkQuietPlan(t, "destroy plan", destroy)
	if !strings.Contains(destroy, "Plan: 0 to add, 0 to change, 2 to destroy.") {
		t.Errorf("destroy plan: want the seed and the image destroyed, got:\n%s", destroy)
	}
}

// quietPlanNoise is what a plan shows for values that are not there.
var quietPlanNoise = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^\s*[-+~] \w+\s+= ""( -> null)?$`),
	regexp.MustCompile(`(?m)^\s*[-+~] (phone_home_url|rendered_vendor_data)\s+=`),
	regexp.MustCompile(`will be marked as sensitive`),
}

func checkQuietPlan(t *testing.T, what, plan string) {
	t.Helper()
	for _, re := range quietPlanNoise {
		if m := re.FindAllString(plan, -1); len(m) > 0 {
			t.Errorf("%s shows values that are not there (%s): %q\n%s", what, re, m, plan)
		}
	}
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
