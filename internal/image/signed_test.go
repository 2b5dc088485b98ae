package image

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// pgpKey makes a signing key (Ed25519: fast) created at created (zero:
// now) that expires after lifetime (zero: never).
func pgpKey(t *testing.T, name string, created time.Time, lifetime time.Duration) *openpgp.Entity {
	t.Helper()
	cfg := &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA, KeyLifetimeSecs: uint32(lifetime / time.Second)}
	if !created.IsZero() {
		cfg.Time = func() time.Time { return created }
	}
	e, err := openpgp.NewEntity(name, "", name+"@example.invalid", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// armoredPublic is what a vendor publishes of a key.
func armoredPublic(t *testing.T, es ...*openpgp.Entity) string {
	t.Helper()
	var out bytes.Buffer
	for _, e := range es {
		w, err := armor.Encode(&out, openpgp.PublicKeyType, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Serialize(w); err != nil {
			t.Fatal(err)
		}
		w.Close()
		out.WriteString("\n")
	}
	return out.String()
}

func signAt(at time.Time) *packet.Config {
	if at.IsZero() {
		return nil
	}
	return &packet.Config{Time: func() time.Time { return at }}
}

// detached signs data with each signer in turn, the signatures one after
// the other (as Ubuntu's SHA256SUMS.gpg holds two), armored or binary.
func detached(t *testing.T, data []byte, armored bool, signers ...*openpgp.Entity) []byte {
	t.Helper()
	var raw bytes.Buffer
	for _, e := range signers {
		if err := openpgp.DetachSign(&raw, e, bytes.NewReader(data), nil); err != nil {
			t.Fatal(err)
		}
	}
	if !armored {
		return raw.Bytes()
	}
	var out bytes.Buffer
	w, err := armor.Encode(&out, openpgp.SignatureType, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write(raw.Bytes())
	w.Close()
	return out.Bytes()
}

func clearsigned(t *testing.T, e *openpgp.Entity, body []byte, cfg *packet.Config) []byte {
	t.Helper()
	var out bytes.Buffer
	w, err := clearsign.Encode(&out, e.PrivateKey, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write(body)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// signedFixture serves an image and its SHA512SUMS over https.
type signedFixture struct {
	srv  *imageServer
	img  []byte
	sums []byte
	src  string
}

func newSignedFixture(t *testing.T) *signedFixture {
	f := &signedFixture{srv: newTLSImageServer(t), img: makeRaw(1<<20, true)}
	f.sums = []byte(hexSHA512(f.img) + "  disk.raw\n" + hexSHA512([]byte("other")) + "  other.raw\n")
	f.src = f.srv.put("/disk.raw", f.img)
	return f
}

func (f *signedFixture) req(sums []byte, sig []byte, keys string) Request {
	r := Request{Source: f.src, ChecksumURL: f.srv.put("/SHA512SUMS", sums), ChecksumSigningKeys: keys, Client: f.srv.Client()}
	if sig != nil {
		r.ChecksumSignatureURL = f.srv.put("/SHA512SUMS.sign", sig)
	}
	return r
}

// refused asserts a refusal wrapping ErrSignature before any image byte
// was served or cached.
func (f *signedFixture) refused(t *testing.T, req Request, parts ...string) {
	t.Helper()
	dir := t.TempDir()
	_, err := fetch(t, &Cache{Dir: dir}, req)
	if !errors.Is(err, ErrSignature) {
		t.Fatalf("error %v does not wrap ErrSignature", err)
	}
	errContains(t, err, parts...)
	if gets, _ := f.srv.count("/disk.raw"); gets != 0 {
		t.Errorf("the image was requested %d times before the refusal", gets)
	}
	assertEmptyCache(t, dir)
}

func TestSignedSumsDetached(t *testing.T) {
	vendor, other := pgpKey(t, "vendor", time.Time{}, 0), pgpKey(t, "other", time.Time{}, 0)
	for _, tc := range []struct {
		name    string
		armored bool
		signers []*openpgp.Entity
		keys    []*openpgp.Entity
	}{
		{"armored", true, []*openpgp.Entity{vendor}, []*openpgp.Entity{vendor}},
		{"binary", false, []*openpgp.Entity{vendor}, []*openpgp.Entity{vendor}},
		// Ubuntu signs with two keys; the user may hold only the second.
		{"two signatures, second key given", true, []*openpgp.Entity{other, vendor}, []*openpgp.Entity{vendor}},
		{"two keys given", true, []*openpgp.Entity{vendor}, []*openpgp.Entity{other, vendor}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSignedFixture(t)
			r := mustFetch(t, &Cache{Dir: t.TempDir()}, f.req(f.sums, detached(t, f.sums, tc.armored, tc.signers...), armoredPublic(t, tc.keys...)))
			if r.SignedBy != fingerprint(vendor) || !r.Verified || r.ChecksumOverHTTP || r.Digest.Hex != hexSHA512(f.img) {
				t.Errorf("signed by %q (want %s), verified %v, over http %v, digest %s", r.SignedBy, fingerprint(vendor), r.Verified, r.ChecksumOverHTTP, r.Digest)
			}
			assertFile(t, r.Path, f.img)
		})
	}
}

func TestSignedSumsRefused(t *testing.T) {
	vendor, stranger := pgpKey(t, "vendor", time.Time{}, 0), pgpKey(t, "stranger", time.Time{}, 0)
	keys := armoredPublic(t, vendor)

	t.Run("another key", func(t *testing.T) {
		f := newSignedFixture(t)
		f.refused(t, f.req(f.sums, detached(t, f.sums, true, stranger), keys),
			"made by key "+fingerprint(stranger), "not among the signing keys given ("+fingerprint(vendor)+")")
	})
	t.Run("tampered sums file", func(t *testing.T) {
		f := newSignedFixture(t)
		sig := detached(t, f.sums, true, vendor)
		evil := bytes.Replace(f.sums, []byte(hexSHA512(f.img)), []byte(hexSHA512([]byte("evil"))), 1)
		f.refused(t, f.req(evil, sig, keys), "does not match the signature by key "+fingerprint(vendor), "changed after it was signed")
	})
	t.Run("signature of another file", func(t *testing.T) {
		f := newSignedFixture(t)
		f.refused(t, f.req(f.sums, detached(t, []byte("something else\n"), false, vendor), keys), "does not match the signature")
	})
	t.Run("garbage signature", func(t *testing.T) {
		f := newSignedFixture(t)
		f.refused(t, f.req(f.sums, []byte("-----BEGIN PGP SIGNATURE-----\n\nnot base64 at all\n-----END PGP SIGNATURE-----\n"), keys))
	})
	t.Run("oversized signature", func(t *testing.T) {
		f := newSignedFixture(t)
		f.refused(t, f.req(f.sums, bytes.Repeat([]byte{0xC2}, MaxSignatureSize+1), keys), "larger than 65536 bytes")
	})
	t.Run("unsigned file, no signature URL", func(t *testing.T) {
		f := newSignedFixture(t)
		f.refused(t, f.req(f.sums, nil, keys), "is not clear-signed, and no signature URL was given")
	})
	t.Run("expired key", func(t *testing.T) {
		born := time.Now().Add(-72 * time.Hour)
		old := pgpKey(t, "old", born, 24*time.Hour)
		f := newSignedFixture(t)
		var raw bytes.Buffer
		if err := openpgp.ArmoredDetachSign(&raw, old, bytes.NewReader(f.sums), signAt(born.Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		f.refused(t, f.req(f.sums, raw.Bytes(), armoredPublic(t, old)), "key "+fingerprint(old)+" has expired")
	})
	t.Run("revoked key", func(t *testing.T) {
		gone := pgpKey(t, "gone", time.Time{}, 0)
		f := newSignedFixture(t)
		sig := detached(t, f.sums, true, gone)
		if err := gone.RevokeKey(packet.KeyCompromised, "leaked", nil); err != nil {
			t.Fatal(err)
		}
		f.refused(t, f.req(f.sums, sig, armoredPublic(t, gone)), "key "+fingerprint(gone)+" is revoked")
	})
}

func TestSignedSumsClearsigned(t *testing.T) {
	vendor, stranger := pgpKey(t, "vendor", time.Time{}, 0), pgpKey(t, "stranger", time.Time{}, 0)
	keys := armoredPublic(t, vendor)

	t.Run("valid", func(t *testing.T) {
		f := newSignedFixture(t)
		// A line starting with a dash is dash-escaped in the signed text.
		body := append([]byte("-- SHA512 sums --\n"), f.sums...)
		r := mustFetch(t, &Cache{Dir: t.TempDir()}, f.req(clearsigned(t, vendor, body, nil), nil, keys))
		if r.SignedBy != fingerprint(vendor) || !r.Verified || r.Digest.Hex != hexSHA512(f.img) {
			t.Errorf("signed by %q, verified %v, digest %s", r.SignedBy, r.Verified, r.Digest)
		}
	})
	t.Run("only the signed body is read", func(t *testing.T) {
		f := newSignedFixture(t)
		// The signed body lists other.raw only; the image's line sits
		// outside the signature, before and after it.
		line := hexSHA512(f.img) + "  disk.raw\n"
		signed := clearsigned(t, vendor, []byte(hexSHA512([]byte("other"))+"  other.raw\n"), nil)
		file := append(append([]byte(line), signed...), line...)
		_, err := fetch(t, &Cache{Dir: t.TempDir()}, f.req(file, nil, keys))
		errContains(t, err, `"disk.raw"`, "other.raw")
		if gets, _ := f.srv.count("/disk.raw"); gets != 0 {
			t.Errorf("the image was requested on an unsigned line")
		}
	})
	t.Run("tampered body", func(t *testing.T) {
		f := newSignedFixture(t)
		cs := clearsigned(t, vendor, f.sums, nil)
		evil := bytes.Replace(cs, []byte(hexSHA512(f.img)), []byte(hexSHA512([]byte("evil"))), 1)
		f.refused(t, f.req(evil, nil, keys), "does not match the signature by key "+fingerprint(vendor))
	})
	t.Run("another key", func(t *testing.T) {
		f := newSignedFixture(t)
		f.refused(t, f.req(clearsigned(t, stranger, f.sums, nil), nil, keys), "made by key "+fingerprint(stranger))
	})
	t.Run("malformed", func(t *testing.T) {
		f := newSignedFixture(t)
		cs := clearsigned(t, vendor, f.sums, nil)
		cut := cs[:bytes.Index(cs, []byte("-----END PGP SIGNATURE-----"))]
		f.refused(t, f.req(cut, nil, keys), "clear-signed file is malformed")
	})
	t.Run("no keys: read as before, not signed", func(t *testing.T) {
		f := newSignedFixture(t)
		r := mustFetch(t, &Cache{Dir: t.TempDir()}, f.req(clearsigned(t, stranger, f.sums, nil), nil, ""))
		if r.SignedBy != "" || !r.Verified {
			t.Errorf("signed by %q, verified %v", r.SignedBy, r.Verified)
		}
	})
}

// A signature over plain http follows the checksum URL's rule, and a
// verified signature makes a plain http checksum file count as verified.
func TestSignedSumsOverHTTP(t *testing.T) {
	vendor := pgpKey(t, "vendor", time.Time{}, 0)
	img := makeRaw(1<<20, true)
	sums := []byte(hexSHA512(img) + "  disk.raw\n")
	srv := newImageServer(t)
	addr := srv.Listener.Addr().String()
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	remote := func(u string) string { return strings.Replace(u, "127.0.0.1", "mirror.invalid", 1) }
	req := Request{
		Client:               cl,
		Source:               remote(srv.put("/disk.raw", img)),
		ChecksumURL:          srv.put("/SHA512SUMS", sums), // loopback: allowed
		ChecksumSignatureURL: remote(srv.put("/SHA512SUMS.sign", detached(t, sums, true, vendor))),
		ChecksumSigningKeys:  armoredPublic(t, vendor),
	}
	_, err := fetch(t, &Cache{Dir: t.TempDir()}, req)
	errContains(t, err, "checksum signature URL "+req.ChecksumSignatureURL+" is plain http")
	req.ChecksumURL = remote(req.ChecksumURL)
	req.AllowHTTPChecksumURL = true
	r := mustFetch(t, &Cache{Dir: t.TempDir()}, req)
	if !r.Verified || r.ChecksumOverHTTP || r.SignedBy != fingerprint(vendor) {
		t.Errorf("verified %v, over http %v, signed by %q", r.Verified, r.ChecksumOverHTTP, r.SignedBy)
	}
}

func TestSignedSumsRequestChecks(t *testing.T) {
	vendor := pgpKey(t, "vendor", time.Time{}, 0)
	f := newSignedFixture(t)
	_, err := fetch(t, &Cache{Dir: t.TempDir()}, Request{Source: f.src, ChecksumSigningKeys: armoredPublic(t, vendor)})
	errContains(t, err, "need a checksum URL")
	req := f.req(f.sums, detached(t, f.sums, true, vendor), "")
	_, err = fetch(t, &Cache{Dir: t.TempDir()}, req)
	errContains(t, err, "needs the signing keys")
}

func TestParseSigningKeys(t *testing.T) {
	a, b := pgpKey(t, "a", time.Time{}, 0), pgpKey(t, "b", time.Time{}, 0)
	k, err := ParseSigningKeys("Debian's keys:\n" + armoredPublic(t, a, b) + "trailing words\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.Fingerprints(), " "); got != fingerprint(a)+" "+fingerprint(b) || len(fingerprint(a)) != 40 {
		t.Errorf("fingerprints %q", got)
	}
	var priv bytes.Buffer
	w, _ := armor.Encode(&priv, openpgp.PrivateKeyType, nil)
	if err := a.SerializePrivate(w, nil); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for _, tc := range []struct{ in, want string }{
		{priv.String(), "private key block"},
		{"", "must be ASCII-armored OpenPGP public keys"},
		{"ssh-ed25519 AAAA user@host", "must be ASCII-armored OpenPGP public keys"},
		{"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nbm90IGEga2V5\n-----END PGP PUBLIC KEY BLOCK-----\n", "signing key block 1 of 1"},
		{strings.Repeat(" ", MaxSigningKeysSize+1), "more than 1048576"},
	} {
		if _, err := ParseSigningKeys(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSigningKeys(%.40q): %v, want %q", tc.in, err, tc.want)
		}
	}
}
