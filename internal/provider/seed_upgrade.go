package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
)

var _ resource.ResourceWithUpgradeState = (*seedResource)(nil)

// seedSchemaVersion is kohaku_seed's schema version. Version 0 kept the
// whole user-data document in state (rendered_user_data, with the
// first-boot reporter in it) and a flag saying why it was null
// (user_data_write_only); version 1 keeps its digest, user_data_sha256.
const seedSchemaVersion = 1

// UpgradeState turns the state of earlier schema versions into the
// current one without touching the host: the ISO is the same, so the next
// plan is empty.
func (r *seedResource) UpgradeState(context.Context) map[int64]resource.StateUpgrader {
	return map[int64]resource.StateUpgrader{
		0: {StateUpgrader: func(_ context.Context, req resource.UpgradeStateRequest, resp *resource.UpgradeStateResponse) {
			if req.RawState == nil || req.RawState.JSON == nil {
				resp.Diagnostics.AddError("Upgrading the state of a kohaku_seed",
					"The stored state of this seed is not JSON, which no Kohaku release wrote. Remove it "+
						"(terraform state rm) and import the seed again (terraform import).")
				return
			}
			out, err := upgradeSeedStateV0(req.RawState.JSON)
			if err != nil {
				resp.Diagnostics.AddError("Upgrading the state of a kohaku_seed", err.Error()+
					". Remove it (terraform state rm) and import the seed again (terraform import).")
				return
			}
			resp.DynamicValue = &tfprotov6.DynamicValue{JSON: out}
		}},
	}
}

// upgradeSeedStateV0 rewrites the attributes of a version 0 seed state
// (JSON, as Terraform stores them) for version 1: rendered_user_data, the
// exact user-data document on the ISO, becomes user_data_sha256, its
// digest, which is what the plan computes from the same document; and
// user_data_write_only goes. A document that was null (none, or one with
// write-only values) gives a null digest, as the plan does. Everything
// else is carried over unchanged.
func upgradeSeedStateV0(raw []byte) ([]byte, error) {
	var attrs map[string]json.RawMessage
	if err := json.Unmarshal(raw, &attrs); err != nil {
		return nil, fmt.Errorf("the stored state of this seed is not a JSON object: %w", err)
	}
	if attrs == nil {
		return nil, errors.New("the stored state of this seed is empty")
	}
	var doc *string
	if v, ok := attrs["rendered_user_data"]; ok {
		if err := json.Unmarshal(v, &doc); err != nil {
			return nil, fmt.Errorf("rendered_user_data of the stored state is not a string: %w", err)
		}
	}
	var writeOnly *bool
	if v, ok := attrs["user_data_write_only"]; ok {
		if err := json.Unmarshal(v, &writeOnly); err != nil {
			return nil, fmt.Errorf("user_data_write_only of the stored state is not a bool: %w", err)
		}
	}
	delete(attrs, "rendered_user_data")
	delete(attrs, "user_data_write_only")
	digest := json.RawMessage("null")
	if doc != nil && *doc != "" && (writeOnly == nil || !*writeOnly) {
		sum := sha256.Sum256([]byte(*doc))
		digest, _ = json.Marshal(hex.EncodeToString(sum[:])) // a string always marshals
	}
	attrs["user_data_sha256"] = digest
	return json.Marshal(attrs)
}
