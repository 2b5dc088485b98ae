package provider

import (
	"context"
	"encoding/json"

	"github.com/hashicorp/terraform-plugin-framework/diag"
)

// seedWrittenKey is the private-state key under which a seed keeps the
// checksum of the ISO it last wrote to the host. A seed's content is a
// function of its inputs and of the provider version that renders them; when
// a newer version renders the same inputs differently, the checksum lets the
// plan keep the ISO the host has instead of rewriting it (which would also
// give the guest a new instance id, and cloud-init would run its first boot
// again on the next reboot).
const seedWrittenKey = "written"

type seedWritten struct {
	SHA256 string `json:"sha256"`
}

type privateGetter interface {
	GetKey(ctx context.Context, key string) ([]byte, diag.Diagnostics)
}

type privateSetter interface {
	SetKey(ctx context.Context, key string, value []byte) diag.Diagnostics
}

// writtenSeed reads what the seed last wrote; false when nothing is recorded.
func writtenSeed(ctx context.Context, p privateGetter) (seedWritten, bool) {
	var w seedWritten
	if p == nil {
		return w, false
	}
	b, diags := p.GetKey(ctx, seedWrittenKey)
	if diags.HasError() || len(b) == 0 || json.Unmarshal(b, &w) != nil || w.SHA256 == "" {
		return seedWritten{}, false
	}
	return w, true
}

// recordWrittenSeed records the checksum of the ISO now on the host.
func recordWrittenSeed(ctx context.Context, p privateSetter, sha256 string, diags *diag.Diagnostics) {
	if p == nil || sha256 == "" {
		return
	}
	b, err := json.Marshal(seedWritten{SHA256: sha256})
	if err != nil {
		diags.AddError("Recording the seed's checksum", err.Error())
		return
	}
	diags.Append(p.SetKey(ctx, seedWrittenKey, b)...)
}
