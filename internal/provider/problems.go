package provider

import (
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/validation"
)

// problemReport says how one resource reports the input problems of the
// packages below (seed and domain share their shape, validation.Error).
type problemReport struct {
	// attr maps a problem's path onto the resource's schema; false when it
	// names no attribute the user can point at.
	attr func(validation.Path) (path.Path, bool)
	// skip drops problems about values not known yet; nil skips none.
	skip func(validation.Path) bool
	// summary titles a problem on attribute p (written as where);
	// general titles one without an attribute.
	summary func(p path.Path, where string) string
	general string
	// detail says what is wrong, where, and what would be right.
	detail func(where string, e *validation.Error) string
}

// addValidationErrors turns every validation.Error inside err into a
// diagnostic on the attribute it is about. It reports whether err held any;
// an error holding none is left to the caller.
func addValidationErrors(diags *diag.Diagnostics, err error, r problemReport) bool {
	all := validation.All(err)
	for _, e := range all {
		if r.skip != nil && r.skip(e.Path) {
			continue
		}
		p, ok := r.attr(e.Path)
		where := e.Path.String()
		if ok {
			where = attrString(p)
		}
		if ok {
			diags.AddAttributeError(configLine(p), r.summary(p, where), r.detail(where, e))
		} else {
			diags.AddError(r.general, r.detail(where, e))
		}
	}
	return len(all) > 0
}

// configLine cuts an attribute path to what Terraform can place in the
// configuration: the resource's own attribute, with the element of a list,
// set or map it is about (users[0], meta_data["k"]). Terraform places an
// attribute diagnostic by walking nested blocks and then looking the path's
// last name up in the body it reached; nested attributes are expressions,
// not blocks, so for users[0].name it would look up "name" in the resource
// itself and highlight the resource's own name line. The full path stays in
// the diagnostic's text.
func configLine(p path.Path) path.Path {
	steps := p.Steps()
	keep := 1
	if len(steps) > 1 {
		if _, name := steps[1].(path.PathStepAttributeName); !name {
			keep = 2
		}
	}
	for len(p.Steps()) > keep {
		p = p.ParentPath()
	}
	return p
}

// attrString names an attribute for a message, e.g. network_interface[1].mac.
func attrString(p path.Path) string {
	var b strings.Builder
	for _, s := range p.Steps() {
		switch s := s.(type) {
		case path.PathStepAttributeName:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(string(s))
		case path.PathStepElementKeyInt:
			fmt.Fprintf(&b, "[%d]", int64(s))
		case path.PathStepElementKeyString:
			fmt.Fprintf(&b, "[%q]", string(s))
		case path.PathStepElementKeyValue:
			fmt.Fprintf(&b, "[%s]", s.Value.String())
		}
	}
	return b.String()
}

// ---------------------------------------------------------------- kohaku_seed

// seedPathNames maps the seed package's input names to this schema's.
var seedPathNames = map[string][]string{
	"mounts":               {"shared_folders"},
	"nvidia":               {"nvidia_driver"},
	"root_authorized_keys": {"user", "root_authorized_keys"},
	"permit_root_login":    {"user", "permit_root_login"},
}

// seedReport reports the seed renderer's problems on kohaku_seed.
var seedReport = problemReport{
	attr:    seedAttrPath,
	summary: func(path.Path, string) string { return "Invalid seed input" },
	general: "Invalid seed input",
	detail: func(where string, e *validation.Error) string {
		detail := where + ": " + e.Problem
		if e.Example != "" {
			detail += ". For example: " + e.Example
		}
		if e.Err != nil && !strings.Contains(detail, e.Err.Error()) {
			detail += " (" + e.Err.Error() + ")"
		}
		return detail
	},
}

// addSeedErrors turns the renderer's validation errors into attribute errors.
func addSeedErrors(diags *diag.Diagnostics, err error) {
	if !addValidationErrors(diags, err, seedReport) {
		diags.AddError("Rendering the seed", err.Error())
	}
}

// seedAttrPath maps a seed input path (network[0].addresses[1],
// meta_data["k"]) onto kohaku_seed's schema. ok is false for paths with no
// attribute (the spec as a whole, phone_home, public_keys).
func seedAttrPath(vp validation.Path) (path.Path, bool) {
	if len(vp) == 0 || vp[0].Kind != validation.StepName {
		return path.Empty(), false
	}
	switch top := vp[0].Name; {
	case top == "spec", top == "phone_home", strings.HasPrefix(top, "public_keys"):
		return path.Empty(), false
	}
	names := []string{vp[0].Name}
	if mapped, ok := seedPathNames[vp[0].Name]; ok {
		names = mapped
	}
	p := path.Root(names[0])
	for _, n := range names[1:] {
		p = p.AtName(n)
	}
	for _, s := range vp[1:] {
		switch s.Kind {
		case validation.StepName:
			p = p.AtName(s.Name)
		case validation.StepIndex:
			p = p.AtListIndex(s.Index)
		case validation.StepKey:
			p = p.AtMapKey(s.Key)
		}
	}
	return p, true
}

// ---------------------------------------------------------------- kohaku_vm

// report reports the domain package's problems with this input on
// kohaku_vm, skipping those about values not known yet.
func (in *specInput) report() problemReport {
	return problemReport{
		attr: in.schemaPath,
		skip: in.skips,
		summary: func(_ path.Path, where string) string {
			return "Invalid " + where
		},
		general: "Invalid VM configuration",
		detail: func(where string, e *validation.Error) string {
			detail := fmt.Sprintf("%s: %s.", where, e.Problem)
			if e.Example != "" {
				detail += " For example: " + e.Example + "."
			}
			return detail
		},
	}
}

// skips reports whether a problem at domain path p is about a value not
// known yet (or an element holding one).
func (in *specInput) skips(p validation.Path) bool {
	for _, u := range in.Unknown {
		if p.HasPrefix(validation.ParsePath(u)) {
			return true
		}
	}
	return false
}

// schemaPath maps a domain package path (network_interface[1].mac,
// hostdev[0], disk.volume, seed.pool, ...) onto kohaku_vm's schema.
func (in *specInput) schemaPath(dp validation.Path) (path.Path, bool) {
	if len(dp) == 0 || dp[0].Kind != validation.StepName {
		return path.Empty(), false
	}
	top, rest := dp[0].Name, dp[1:]
	idx := -1
	if len(rest) > 0 && rest[0].Kind == validation.StepIndex {
		idx, rest = rest[0].Index, rest[1:]
	}
	sub := ""
	if len(rest) > 0 && rest[0].Kind == validation.StepName {
		sub = rest[0].Name
	}
	switch top {
	case "disk":
		switch sub {
		case "pool":
			return path.Root("disk").AtName("pool"), true
		case "volume":
			if in.DiskMode == "base_volume" {
				return path.Root("disk").AtName("base_volume"), true
			}
			return path.Root("disk").AtName("volume"), true
		}
		return path.Root("disk"), true
	case "seed":
		return path.Root("seed_id"), true
	case "network_interface", "shared_folder", "data_disks":
		if idx < 0 {
			return path.Root(top), true
		}
		p := path.Root(top).AtListIndex(idx)
		if sub != "" {
			p = p.AtName(sub)
		}
		return p, true
	case "hostdev":
		if idx >= 0 && idx < len(in.Hostdevs) {
			o := in.Hostdevs[idx]
			return path.Root(o.Attr).AtSetValue(types.StringValue(o.Value)), true
		}
		return path.Root("hostdevs"), true
	case "mdev":
		if idx >= 0 && idx < len(in.Spec.Mdevs) {
			return path.Root("mdevs").AtSetValue(types.StringValue(in.Spec.Mdevs[idx])), true
		}
		return path.Root("mdevs"), true
	case "name", "type", "vcpu", "memory_mib", "machine", "firmware", "cpu_mode", "kernel", "initrd", "cmdline", "serial_log_path", "cpu_topology", "pci_mmio64_gib":
		return path.Root(top), true
	case "hugepages":
		if sub != "" {
			return path.Root(top).AtName(sub), true
		}
		return path.Root(top), true
	}
	return path.Empty(), false
}
