package seed

import (
	"crypto/sha3"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// DeriveMAC returns "52:54:00:" followed by the first three bytes of
// SHA3-224(name) in lower-case hex, as KohakuRiver's
// hashlib.sha3_224(str(x).encode()).digest() does. 52:54:00 is QEMU's
// locally administered prefix.
func DeriveMAC(name string) string {
	h := sha3.Sum224([]byte(name))
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", h[0], h[1], h[2])
}

// DefaultMAC is the MAC a NIC at index gets when its MAC is empty:
// DeriveMAC(name) for the first NIC and DeriveMAC(name + "/" + index) for
// the others.
func DefaultMAC(name string, index int) string {
	if index == 0 {
		return DeriveMAC(name)
	}
	return DeriveMAC(name + "/" + strconv.Itoa(index))
}

// normalizeMAC parses a 6-byte MAC in colon or hyphen form and returns it as
// lower-case colon-separated hex.
func normalizeMAC(s string) (string, error) {
	if strings.Count(s, ":")+strings.Count(s, "-") != 5 || len(s) != 17 {
		return "", fmt.Errorf("want six hex octets separated by colons, got %q", s)
	}
	hw, err := net.ParseMAC(s)
	if err != nil {
		return "", err
	}
	if len(hw) != 6 {
		return "", fmt.Errorf("want a 6-byte Ethernet address, got %d bytes", len(hw))
	}
	if string(hw) == "\x00\x00\x00\x00\x00\x00" {
		return "", fmt.Errorf("%s is the all-zero address", s)
	}
	if hw[0]&1 == 1 {
		return "", fmt.Errorf("%s is a multicast address (lowest bit of the first octet set)", s)
	}
	return hw.String(), nil
}
