package seed

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// A refresh reads the image after its system area; the digest it computes
// must be the whole image's, which holds only because BuildISO leaves the
// system area zero. The part read is what the ISO 9660 reader of the guest
// sees: a change there changes the digest.
func TestISODigestFromTail(t *testing.T) {
	iso, err := BuildISO("cidata", map[string][]byte{
		"meta-data":      []byte("instance-id: i-1\n"),
		"user-data":      make([]byte, 31<<10),
		"network-config": []byte("version: 2\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	whole := sha256.Sum256(iso)
	if got := ISODigest(iso[SystemAreaBytes:]); got != hex.EncodeToString(whole[:]) {
		t.Fatalf("digest from the tail %s, want the image's %s: the system area is not zero", got, hex.EncodeToString(whole[:]))
	}
	tail := append([]byte(nil), iso[SystemAreaBytes:]...)
	tail[len(tail)-1] ^= 1
	if ISODigest(tail) == hex.EncodeToString(whole[:]) {
		t.Fatal("a changed byte after the system area left the digest as it was")
	}
	if n := len(iso) - SystemAreaBytes; n > 64<<10 {
		t.Errorf("a typical seed (31 KiB of user data) needs %d bytes read per refresh, more than 64 KiB", n)
	} else {
		t.Logf("ISO %d bytes; a refresh reads %d (%.0f%%)", len(iso), n, 100*float64(n)/float64(len(iso)))
	}
}
