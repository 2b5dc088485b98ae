package seed

import (
	"bytes"
	"testing"
)

// The largest seed Render accepts (documents of MaxSeedBytes in all) fits in
// MaxVolumeBytes, the cap kohaku_seed and kohaku_vm read seed volumes with,
// so every seed that can be created can be read back.
func TestMaxVolumeBytesHoldsTheLargestSeed(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{
		FileMetaData:      []byte("instance-id: big\n"),
		FileNetworkConfig: []byte("version: 2\n"),
	}
	rest := MaxSeedBytes - len(files[FileMetaData]) - len(files[FileNetworkConfig])
	files[FileUserData] = bytes.Repeat([]byte{'k'}, rest/2)
	files[FileVendorData] = bytes.Repeat([]byte{'v'}, rest-rest/2)
	total := 0
	for _, b := range files {
		total += len(b)
	}
	if total != MaxSeedBytes {
		t.Fatalf("test documents are %d bytes, want exactly %d", total, MaxSeedBytes)
	}
	iso, err := BuildISO(LabelNoCloud, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(iso) > MaxVolumeBytes {
		t.Errorf("a seed of %d document bytes is a %d-byte volume, over MaxVolumeBytes (%d)", total, len(iso), MaxVolumeBytes)
	}
	if len(iso) < MaxSeedBytes {
		t.Errorf("the volume (%d bytes) is smaller than its documents", len(iso))
	}
}
