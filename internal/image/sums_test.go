package image

import (
	"strings"
	"testing"
)

var (
	sumA   = strings.Repeat("a1", 32)
	sumB   = strings.Repeat("b2", 32)
	sumC   = strings.Repeat("c3", 32)
	sum512 = strings.Repeat("d4", 64)
)

func TestParseSums(t *testing.T) {
	cases := []struct {
		name, file, look string
		want             Digest
	}{
		{"gnu text mode", sumA + "  other.qcow2\n" + sumB + "  debian-12-generic-amd64.qcow2\n", "debian-12-generic-amd64.qcow2", Digest{SHA256, sumB}},
		{"gnu binary mode", sumA + " *noble-server-cloudimg-amd64.img\n" + sumB + " *noble-server-cloudimg-amd64.tar.gz\n", "noble-server-cloudimg-amd64.img", Digest{SHA256, sumA}},
		{"uppercase hex", strings.ToUpper(sumC) + "  x.img\n", "x.img", Digest{SHA256, sumC}},
		{"dot slash", sumA + "  ./images/x.raw\n" + sumB + "  ./y.raw\n", "y.raw", Digest{SHA256, sumB}},
		{"path in file", sumA + "  images/amd64/disk.qcow2\n", "disk.qcow2", Digest{SHA256, sumA}},
		{"exact path preferred", sumA + "  arm64/disk.qcow2\n" + sumB + "  amd64/disk.qcow2\n", "amd64/disk.qcow2", Digest{SHA256, sumB}},
		{"sha512 by length", sum512 + "  debian-12-genericcloud-amd64.raw\n", "debian-12-genericcloud-amd64.raw", Digest{SHA512, sum512}},
		{"bsd", "# Fedora-Cloud-Base-40-1.14-x86_64-CHECKSUM\nSHA256 (Fedora-Cloud-Base-Generic.x86_64-40-1.14.qcow2) = " + sumC + "\nSHA256 (other.raw.xz) = " + sumA + "\n",
			"Fedora-Cloud-Base-Generic.x86_64-40-1.14.qcow2", Digest{SHA256, sumC}},
		{"bsd sha512", "SHA512 (x.qcow2) = " + sum512 + "\n", "x.qcow2", Digest{SHA512, sum512}},
		{"sha512 preferred", "SHA256 (x.qcow2) = " + sumA + "\nSHA512 (x.qcow2) = " + sum512 + "\n", "x.qcow2", Digest{SHA512, sum512}},
		{"crlf and comments", "# comment\r\n\r\n" + sumA + "  x.img\r\n", "x.img", Digest{SHA256, sumA}},
		{"pgp signed", "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n" +
			sumA + "  x.qcow2\n- " + sumB + "  dash-escaped.qcow2\n" +
			"-----BEGIN PGP SIGNATURE-----\n\niQIzBAEBCAAdFiEE" + sumC + "  x.qcow2\n=abcd\n-----END PGP SIGNATURE-----\n",
			"x.qcow2", Digest{SHA256, sumA}},
		{"pgp dash-escaped", "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\n- " + sumB + "  y.qcow2\n-----BEGIN PGP SIGNATURE-----\nxx\n-----END PGP SIGNATURE-----\n",
			"y.qcow2", Digest{SHA256, sumB}},
		{"look up by path", sumA + "  x.img\n", "https-dir/x.img", Digest{SHA256, sumA}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseSums(strings.NewReader(c.file), c.look)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestParseSumsErrors(t *testing.T) {
	many := ""
	for _, n := range []string{"a.img", "b.img", "c.img", "d.img", "e.img", "f.img", "g.img"} {
		many += sumA + "  " + n + "\n"
	}
	cases := []struct {
		name, file, look string
		want             []string
	}{
		{"missing", many, "x.qcow2", []string{`no entry for "x.qcow2"`, `"a.img", "b.img", "c.img", "d.img", "e.img", and 2 more`}},
		{"missing few", sumA + "  a.img\n", "x.qcow2", []string{`no entry for "x.qcow2"; it lists "a.img"`}},
		{"not a sums file", "<html><body>Not Found</body></html>\n", "x.qcow2", []string{"no checksum lines", `"x.qcow2"`}},
		{"signature only", "-----BEGIN PGP SIGNATURE-----\n" + sumA + "  x.qcow2\n-----END PGP SIGNATURE-----\n", "x.qcow2", []string{"no checksum lines"}},
		{"md5 only", "d41d8cd98f00b204e9800998ecf8427e  x.qcow2\n", "x.qcow2", []string{"only with unsupported algorithm md5"}},
		{"conflict", sumA + "  x.qcow2\n" + sumB + "  ./x.qcow2\n", "x.qcow2", []string{"more than once with different sha256 digests"}},
		{"bad bsd length", "SHA256 (x.qcow2) = abcd\n", "x.qcow2", []string{"no checksum lines"}},
		{"no name", sumA + "  x.qcow2\n", "", []string{"no file name"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSums(strings.NewReader(c.file), c.look)
			errContains(t, err, c.want...)
		})
	}
}
