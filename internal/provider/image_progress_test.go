package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-log/tflogtest"

	"github.com/kohaku/terraform-provider-kohaku/internal/image"
)

// A long transfer logs at INFO every 10 s, not more often: bytes done and
// in all, the rate and the time left, plus the fields of the transfer.
func TestProgressLoggerLogsEveryTenSeconds(t *testing.T) {
	var buf bytes.Buffer
	ctx := tflogtest.RootLogger(context.Background(), &buf)
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	clock := t0
	log := progressLoggerClock(ctx, "uploading image", map[string]any{"name": "debian.qcow2"}, func() time.Time { return clock })

	const total = 1000 << 20
	// Callbacks every second for 25 s at 8 MiB/s; the first has a rate of
	// its own, the others leave it to the logger (the upload's case).
	for s := 1; s <= 25; s++ {
		clock = t0.Add(time.Duration(s) * time.Second)
		p := image.Progress{Done: int64(s) * 8 << 20, Total: total}
		if s == 10 {
			p.Rate = 10 << 20
		}
		log(p)
	}
	entries, err := tflogtest.MultilineJSONDecode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"@level": "info", "@message": "uploading image", "name": "debian.qcow2", "done_mib": 80.0, "total_mib": 1000.0, "rate_mib_s": "10.0", "left": "1m32s", "elapsed": "10s"},
		{"@level": "info", "@message": "uploading image", "name": "debian.qcow2", "done_mib": 160.0, "total_mib": 1000.0, "rate_mib_s": "8.0", "left": "1m45s", "elapsed": "20s"},
	}
	if len(entries) != len(want) {
		b, _ := json.Marshal(entries)
		t.Fatalf("%d log lines in 25 s, want %d (one every 10 s): %s", len(entries), len(want), b)
	}
	for i, w := range want {
		for k, v := range w {
			if entries[i][k] != v {
				t.Errorf("line %d: %s = %#v, want %#v (line: %v)", i, k, entries[i][k], v, entries[i])
			}
		}
	}
}
