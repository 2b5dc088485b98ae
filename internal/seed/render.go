package seed

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"sort"
)

// Render validates spec, renders every seed document and builds the ISO.
// A validation failure is returned as errors.Join of *ValidationError values
// (errors.Is(err, ErrInvalidSpec) holds; ValidationErrors lists them).
func Render(spec *Spec) (*Result, error) {
	pl, err := prepare(spec)
	if err != nil {
		return nil, err
	}
	docs, err := renderDocuments(pl)
	if err != nil {
		return nil, err
	}
	iso, err := BuildISO(pl.label, docs.files)
	if err != nil {
		return nil, fmt.Errorf("seed %q: %w", spec.Name, err)
	}
	sum := sha256.Sum256(iso)
	macs := make([]string, 0, len(pl.nics))
	for _, n := range pl.nics {
		macs = append(macs, n.mac)
	}
	return &Result{
		Format:         pl.format,
		Label:          pl.label,
		Files:          docs.files,
		ISO:            iso,
		ISOSHA256:      hex.EncodeToString(sum[:]),
		InstanceID:     docs.instanceID,
		MACs:           macs,
		UserDataMerged: docs.merged,
		Warnings:       pl.warnings,
	}, nil
}

type documents struct {
	files      map[string][]byte
	instanceID string
	merged     bool
}

// renderDocuments renders the seed's files for the plan's format.
func renderDocuments(pl *plan) (*documents, error) {
	s := pl.spec
	generated, err := renderCloudConfig(pl)
	if err != nil {
		return nil, err
	}
	userData, merged, err := combineUserData(pl.user, generated)
	if err != nil {
		return nil, err
	}

	var network []byte
	switch {
	case len(s.NetworkConfig) > 0:
		network = s.NetworkConfig
	case len(pl.nics) > 0 && pl.format == FormatConfigDrive:
		if network, err = renderNetworkData(pl.nics); err != nil {
			return nil, err
		}
	case len(pl.nics) > 0:
		if network, err = renderNetplan(pl.nics); err != nil {
			return nil, err
		}
	}

	var vendor []byte
	if len(s.VendorData) > 0 {
		vendor = s.VendorData
		if pl.format == FormatConfigDrive {
			if vendor, err = renderConfigDriveVendor(s.VendorData); err != nil {
				return nil, err
			}
		}
	}

	extras, warnings := metaExtras(pl)
	pl.warnings = append(pl.warnings, warnings...)

	instanceID := s.InstanceID
	if instanceID == "" {
		instanceID = defaultInstanceID(pl, extras, userData, vendor, network)
	}

	files := map[string][]byte{}
	if pl.format == FormatConfigDrive {
		meta, err := renderConfigDriveMeta(pl, instanceID, extras)
		if err != nil {
			return nil, err
		}
		files[FileCDMetaData] = meta
		if userData != nil {
			files[FileCDUserData] = userData
		}
		if vendor != nil {
			files[FileCDVendorData] = vendor
		}
		if network != nil {
			files[FileCDNetworkData] = network
		}
	} else {
		meta, err := renderNoCloudMeta(pl, instanceID, extras)
		if err != nil {
			return nil, err
		}
		files[FileMetaData] = meta
		// NoCloud needs a user-data file even when it is empty.
		files[FileUserData] = userData
		if files[FileUserData] == nil {
			files[FileUserData] = []byte{}
		}
		if vendor != nil {
			files[FileVendorData] = vendor
		}
		if network != nil {
			files[FileNetworkConfig] = network
		}
	}
	total := 0
	for _, b := range files {
		total += len(b)
	}
	if total > MaxSeedBytes {
		return nil, invalid("spec", fmt.Sprintf("the rendered seed is %d bytes, more than %d (MaxSeedBytes)", total, MaxSeedBytes), "put large files on a shared folder (mounts)", nil)
	}
	return &documents{files: files, instanceID: instanceID, merged: merged}, nil
}

// defaultInstanceID is "<name>-<first 12 hex digits of a sha256 over
// everything the guest will see except the id itself>", so any change in
// content gives a new instance id and cloud-init runs again.
func defaultInstanceID(pl *plan, extras []string, userData, vendor, network []byte) string {
	h := sha256.New()
	field := func(h hash.Hash, name string, b []byte) {
		fmt.Fprintf(h, "%s:%d:", name, len(b))
		h.Write(b)
	}
	field(h, "format", []byte(pl.format))
	field(h, "name", []byte(pl.spec.Name))
	field(h, "hostname", []byte(pl.hostname))
	for _, k := range pl.spec.PublicKeys {
		field(h, "public-key", []byte(k))
	}
	keys := append([]string(nil), extras...)
	sort.Strings(keys)
	for _, k := range keys {
		field(h, "meta-key", []byte(k))
		field(h, "meta-value", []byte(pl.spec.MetaData[k]))
	}
	field(h, "user-data", userData)
	field(h, "vendor-data", vendor)
	field(h, "network", network)
	return pl.spec.Name + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}
