package seed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// reservedMetaKeys are the meta-data keys Kohaku writes itself, per format.
// An extra key with one of these names is dropped with a warning.
func reservedMetaKeys(f Format) map[string]string {
	if f == FormatConfigDrive {
		return map[string]string{
			"uuid":           "instance_id",
			"instance-id":    "instance_id",
			"hostname":       "hostname",
			"local-hostname": "hostname",
			"name":           "name",
			"public_keys":    "public_keys",
		}
	}
	return map[string]string{
		"instance-id":    "instance_id",
		"local-hostname": "hostname",
	}
}

// metaExtras returns the extra meta-data keys that survive, sorted, and the
// warnings for the ones that do not.
func metaExtras(pl *plan) ([]string, []string) {
	reserved := reservedMetaKeys(pl.format)
	if pl.format == FormatNoCloud && len(pl.spec.PublicKeys) > 0 {
		reserved["public-keys"] = "public_keys"
	}
	var keep, warn []string
	for k := range pl.spec.MetaData {
		if attr, ok := reserved[k]; ok {
			warn = append(warn, fmt.Sprintf("meta_data[%q] was ignored: Kohaku writes %q itself (set it with %s)", k, k, attr))
			continue
		}
		keep = append(keep, k)
	}
	sort.Strings(keep)
	sort.Strings(warn)
	return keep, warn
}

// renderNoCloudMeta renders NoCloud meta-data (YAML).
func renderNoCloudMeta(pl *plan, instanceID string, extras []string) ([]byte, error) {
	m := newMap().set("instance-id", ystr(instanceID))
	if pl.hostname != "" {
		m.set("local-hostname", ystr(pl.hostname))
	}
	if len(pl.spec.PublicKeys) > 0 {
		m.set("public-keys", ystrs(pl.spec.PublicKeys))
	}
	for _, k := range extras {
		m.set(k, ystr(pl.spec.MetaData[k]))
	}
	return encodeYAML(m.node())
}

// renderConfigDriveMeta renders openstack/latest/meta_data.json. cloud-init
// takes the instance id from uuid and local-hostname from hostname.
func renderConfigDriveMeta(pl *plan, instanceID string, extras []string) ([]byte, error) {
	m := map[string]any{
		"uuid":         instanceID,
		"name":         pl.spec.Name,
		"launch_index": 0,
	}
	if pl.hostname != "" {
		m["hostname"] = pl.hostname
	}
	if len(pl.spec.PublicKeys) > 0 {
		keys := map[string]string{}
		for i, k := range pl.spec.PublicKeys {
			keys[fmt.Sprintf("key-%d", i)] = k
		}
		m["public_keys"] = keys
	}
	for _, k := range extras {
		m[k] = pl.spec.MetaData[k]
	}
	return marshalJSON(m)
}

// renderConfigDriveVendor wraps raw vendor data the way cloud-init unwraps
// vendor_data.json: a string under the "cloud-init" key.
func renderConfigDriveVendor(vd []byte) ([]byte, error) {
	return marshalJSON(map[string]string{"cloud-init": string(vd)})
}

// marshalJSON encodes v with sorted keys, two-space indent, no HTML escaping
// and a trailing newline.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encoding JSON: %w", err)
	}
	return b.Bytes(), nil
}
