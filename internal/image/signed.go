package image

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// MaxSignatureSize bounds a detached signature fetched from
// Request.ChecksumSignatureURL: a vendor's holds one or a few signatures
// of well under 2 KiB each.
const MaxSignatureSize = 64 << 10

// MaxSigningKeysSize bounds Request.ChecksumSigningKeys.
const MaxSigningKeysSize = 1 << 20

// ErrSignature is wrapped by the error Fetch returns when the checksum
// file's OpenPGP signature does not verify against the signing keys: made
// by another key, not matching the file, by an expired or revoked key, or
// missing or malformed.
var ErrSignature = errors.New("checksum file signature not verified")

const (
	armorPublicKey = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
	armorSignature = "-----BEGIN PGP SIGNATURE-----"
	armorSigned    = "-----BEGIN PGP SIGNED MESSAGE-----"
)

// SigningKeys is a set of OpenPGP public keys that checksum files may be
// signed by.
type SigningKeys struct {
	ring openpgp.EntityList
}

// ParseSigningKeys reads one or more ASCII-armored OpenPGP public key
// blocks ("-----BEGIN PGP PUBLIC KEY BLOCK-----"), as vendors publish them,
// concatenated. Text around the blocks is ignored; a private key, a
// malformed block or no key at all is an error.
func ParseSigningKeys(armored string) (*SigningKeys, error) {
	if len(armored) > MaxSigningKeysSize {
		return nil, fmt.Errorf("signing keys are %d bytes, more than %d; are they public keys?", len(armored), MaxSigningKeysSize)
	}
	if strings.Contains(armored, "PRIVATE KEY BLOCK-----") {
		return nil, errors.New("signing keys hold a private key block; give only the public keys " +
			"(gpg --armor --export <fingerprint>)")
	}
	blocks := strings.Split(armored, armorPublicKey)
	if len(blocks) < 2 {
		return nil, fmt.Errorf("signing keys must be ASCII-armored OpenPGP public keys, starting %q "+
			"(gpg --armor --export <fingerprint>)", armorPublicKey)
	}
	k := &SigningKeys{}
	for i, b := range blocks[1:] {
		ring, err := openpgp.ReadArmoredKeyRing(strings.NewReader(armorPublicKey + b))
		if err != nil {
			return nil, fmt.Errorf("signing key block %d of %d: %w", i+1, len(blocks)-1, err)
		}
		k.ring = append(k.ring, ring...)
	}
	if len(k.ring) == 0 {
		return nil, errors.New("signing keys hold no key")
	}
	return k, nil
}

// Fingerprints returns the fingerprints of the keys' primary keys, in
// upper-case hex.
func (k *SigningKeys) Fingerprints() []string {
	out := make([]string, len(k.ring))
	for i, e := range k.ring {
		out[i] = fingerprint(e)
	}
	return out
}

func fingerprint(e *openpgp.Entity) string { return fmt.Sprintf("%X", e.PrimaryKey.Fingerprint) }

// verifyDetached checks a detached signature (armored or binary) of data
// and returns the fingerprint of the signer's primary key.
func (k *SigningKeys) verifyDetached(data, sig []byte, now time.Time) (string, error) {
	body := io.Reader(bytes.NewReader(sig))
	if bytes.Contains(sig, []byte(armorSignature)) {
		blk, err := armor.Decode(bytes.NewReader(sig))
		if err != nil {
			return "", fmt.Errorf("%w: the signature is not valid ASCII armor: %v", ErrSignature, err)
		}
		if blk.Type != openpgp.SignatureType {
			return "", fmt.Errorf("%w: the signature file holds a %q block, not a signature", ErrSignature, blk.Type)
		}
		raw, err := io.ReadAll(io.LimitReader(blk.Body, MaxSignatureSize+1))
		if err != nil {
			return "", fmt.Errorf("%w: the signature is not valid ASCII armor: %v", ErrSignature, err)
		}
		body = bytes.NewReader(raw)
		sig = raw
	}
	_, signer, err := openpgp.VerifyDetachedSignature(k.ring, bytes.NewReader(data), body, &packet.Config{Time: func() time.Time { return now }})
	return k.outcome(signer, sig, err)
}

// verifyClearsigned checks an OpenPGP clear-signed text and returns its
// signed body (dash-escapes removed) and the fingerprint of the signer's
// primary key. Whatever surrounds the signed block is dropped.
func (k *SigningKeys) verifyClearsigned(data []byte, now time.Time) ([]byte, string, error) {
	b, _ := clearsign.Decode(data)
	if b == nil {
		return nil, "", fmt.Errorf("%w: the clear-signed file is malformed", ErrSignature)
	}
	raw, err := io.ReadAll(io.LimitReader(b.ArmoredSignature.Body, MaxSignatureSize+1))
	if err != nil {
		return nil, "", fmt.Errorf("%w: the signature block is not valid ASCII armor: %v", ErrSignature, err)
	}
	_, signer, err := openpgp.VerifyDetachedSignature(k.ring, bytes.NewReader(b.Bytes), bytes.NewReader(raw),
		&packet.Config{Time: func() time.Time { return now }})
	fp, err := k.outcome(signer, raw, err)
	if err != nil {
		return nil, "", err
	}
	return b.Plaintext, fp, nil
}

// outcome turns go-crypto's answer into a fingerprint or an error saying
// what is wrong in words a user can act on.
func (k *SigningKeys) outcome(signer *openpgp.Entity, sig []byte, err error) (string, error) {
	who := "its key"
	if signer == nil {
		signer = k.known(sig)
	}
	if signer != nil {
		who = "key " + fingerprint(signer)
	}
	switch {
	case err == nil && signer != nil:
		return fingerprint(signer), nil
	case errors.Is(err, pgperrors.ErrUnknownIssuer):
		return "", fmt.Errorf("%w: it was made by %s, which is not among the signing keys given (%s)",
			ErrSignature, issuers(sig), strings.Join(k.Fingerprints(), ", "))
	case errors.Is(err, pgperrors.ErrKeyRevoked):
		return "", fmt.Errorf("%w: %s is revoked", ErrSignature, who)
	case errors.Is(err, pgperrors.ErrKeyExpired):
		return "", fmt.Errorf("%w: %s has expired", ErrSignature, who)
	case errors.Is(err, pgperrors.ErrSignatureExpired):
		return "", fmt.Errorf("%w: the signature by %s has expired", ErrSignature, who)
	case err == nil:
		return "", fmt.Errorf("%w: no signer", ErrSignature)
	}
	var se pgperrors.SignatureError
	if errors.As(err, &se) {
		return "", fmt.Errorf("%w: the checksum file does not match the signature by %s: it was changed after "+
			"it was signed, or the signature is of another file (%v)", ErrSignature, who, err)
	}
	return "", fmt.Errorf("%w: %v", ErrSignature, err)
}

// known returns the entity of the first signature in sig (a packet
// stream) that names a key of k, or nil.
func (k *SigningKeys) known(sig []byte) *openpgp.Entity {
	pr := packet.NewReader(bytes.NewReader(sig))
	for range 8 {
		p, err := pr.Next()
		if err != nil {
			return nil
		}
		s, ok := p.(*packet.Signature)
		if !ok {
			return nil
		}
		if s.IssuerKeyId != nil {
			if keys := k.ring.KeysByIdUsage(*s.IssuerKeyId, packet.KeyFlagSign); len(keys) > 0 {
				return keys[0].Entity
			}
		}
	}
	return nil
}

// issuers names the keys that made the signatures in sig (a packet
// stream), for an error message.
func issuers(sig []byte) string {
	var ids []string
	pr := packet.NewReader(bytes.NewReader(sig))
	for len(ids) < 8 {
		p, err := pr.Next()
		if err != nil {
			break
		}
		s, ok := p.(*packet.Signature)
		if !ok {
			break
		}
		switch {
		case len(s.IssuerFingerprint) > 0:
			ids = append(ids, fmt.Sprintf("%X", s.IssuerFingerprint))
		case s.IssuerKeyId != nil:
			ids = append(ids, fmt.Sprintf("%016X", *s.IssuerKeyId))
		}
	}
	if len(ids) == 0 {
		return "an unnamed key"
	}
	return "key " + strings.Join(ids, ", key ")
}

// isClearsigned reports whether a checksum file holds an OpenPGP
// clear-signed text (a line starting it, anywhere: what precedes it is not
// signed, and not read).
func isClearsigned(data []byte) bool {
	return bytes.HasPrefix(data, []byte(armorSigned)) || bytes.Contains(data, []byte("\n"+armorSigned))
}
