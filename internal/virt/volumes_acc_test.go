package virt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// accClient connects to the acceptance host, or skips without TF_ACC.
func accClient(t *testing.T) *Client {
	t.Helper()
	uri := acctest.URI(t)
	c, err := New(Settings{URI: uri, CallTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Downloads through libvirt streams, again and again on one connection:
// go-libvirt can deadlock the whole connection at the end of a download
// (see streamEndFilter). Each call is bounded, so a hang fails the test.
func TestAccVolumeDownloadsNeverHang(t *testing.T) {
	c := accClient(t)
	pool := os.Getenv("KOHAKU_TEST_POOL")
	if pool == "" {
		t.Fatal("KOHAKU_TEST_POOL is not set")
	}
	ctx := context.Background()
	name := fmt.Sprintf("kohaku-acc-virt-dl-%d.bin", os.Getpid())
	data := bytes.Repeat([]byte("kohaku seed bytes "), 20000) // ~350 KiB, like a seed
	if _, err := c.UploadVolume(ctx, pool, name, data); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.RemoveVolume(context.Background(), pool, name); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	start := time.Now()
	const rounds = 150
	for i := 0; i < rounds; i++ {
		_, got, err := c.ReadVolume(ctx, pool, name, 1<<20)
		if err != nil {
			t.Fatalf("download %d of %d: %v", i+1, rounds, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("download %d returned %d bytes that differ from the %d uploaded", i+1, len(got), len(data))
		}
	}
	t.Logf("%d downloads in %s on %d connection(s)", rounds, time.Since(start).Round(time.Millisecond), c.Dials())
	if c.Dials() != 1 {
		t.Errorf("dials = %d: a download hung and the connection had to be replaced", c.Dials())
	}
	if _, err := c.UploadVolume(ctx, pool, name, data); !errors.As(err, new(*VolumeExistsError)) {
		t.Errorf("second upload under the same name: %v, want VolumeExistsError", err)
	}
}
