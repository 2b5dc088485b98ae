package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// accPrefix starts the name of everything the acceptance tests create.
const accPrefix = "kohaku-acc-"

func init() {
	resource.AddTestSweepers("kohaku_vm", &resource.Sweeper{
		Name: "kohaku_vm",
		F: func(string) error {
			uri := os.Getenv("KOHAKU_URI")
			if uri == "" {
				uri = "qemu:///system"
			}
			pools := []string{"default"}
			if p := os.Getenv("KOHAKU_TEST_POOL"); p != "" {
				pools = append(pools, p)
			}
			return sweepVMs(uri, accPrefix, pools...)
		},
	})
}

// sweepVMs forces off and undefines every domain whose name starts with
// prefix, deletes the volumes their metadata says they own, and deletes
// leftover overlay volumes (prefix*-root.qcow2) in pools, e.g. from a run
// that died between creating the overlay and defining the domain.
func sweepVMs(uri, prefix string, pools ...string) error {
	if !strings.HasPrefix(prefix, accPrefix) {
		return fmt.Errorf("refusing to sweep %q: only names under %q belong to the tests", prefix, accPrefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := virt.New(virt.Settings{URI: uri})
	if err != nil {
		return err
	}
	defer c.Close()
	doms, err := c.ListDomains(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range doms {
		if !strings.HasPrefix(d.Name, prefix) {
			continue
		}
		var owned []domain.VolumeRef
		if st, err := c.ReadDomain(ctx, d.DomainRef); err == nil {
			if obs, err := domain.Parse(st.XML); err == nil && obs.Metadata != nil {
				owned = obs.Metadata.Owner.Volumes
			}
		}
		if _, err := c.StopDomain(ctx, d.DomainRef, 0); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := c.UndefineDomain(ctx, d.DomainRef); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, v := range owned {
			if err := c.RemoveVolume(ctx, v.Pool, v.Volume); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, p := range pools {
		names, err := c.ListVolumeNames(ctx, p)
		if errors.Is(err, virt.ErrPoolNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, n := range names {
			// Every volume under the prefix is a test's: overlays and seeds.
			if strings.HasPrefix(n, prefix) {
				if err := c.RemoveVolume(ctx, p, n); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// The sweeper removes what a run that crashed mid-create would leave: a
// running domain with its overlay, and an overlay whose domain was never
// defined. It leaves the base image alone.
func TestAccVM_sweeper(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "sweep")
	ctx := context.Background()
	c := vmClient(t, env.URI)
	for _, n := range []string{"a", "b"} {
		if _, err := c.CreateOverlay(ctx, env.Pool, prefix+n+"-root.qcow2", env.ImagePool, env.Base, 0); err != nil {
			t.Fatal(err)
		}
	}
	xml, err := domain.Marshal(domain.Spec{
		Name: prefix + "a", Type: domain.TypeQEMU, VCPU: 1, MemoryMiB: 128,
		Disk:   &domain.Disk{Source: domain.Source{Pool: env.Pool, Volume: prefix + "a-root.qcow2"}},
		Kernel: env.Kernel, Initrd: env.Initrd, SerialLogPath: t.TempDir() + "/serial.log",
		Owner: domain.Ownership{Volumes: []domain.VolumeRef{{Pool: env.Pool, Volume: prefix + "a-root.qcow2"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := c.DefineDomain(ctx, prefix+"a", xml)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StartDomain(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if left, _ := acctest.Leftovers(env.URI, prefix, env.Pool); len(left) != 3 {
		t.Fatalf("want a domain and two overlays before sweeping, found %v", left)
	}
	if err := sweepVMs(env.URI, prefix, env.Pool, "default"); err != nil {
		t.Fatal(err)
	}
	if err := acctest.CheckNothingLeft(env, prefix)(nil); err != nil {
		t.Error(err)
	}
	if _, err := c.VolumeInfo(ctx, env.ImagePool, env.Base); err != nil {
		t.Errorf("the base image: %v", err)
	}
	if err := sweepVMs(env.URI, "web-", env.Pool); err == nil {
		t.Error("sweeping names outside kohaku-acc- was not refused")
	}
}
