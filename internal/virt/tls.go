package virt

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"
)

// tlsDialer dials libvirtd's TLS port the way libvirt's own client does:
// a TLS session with the client certificate, then the one byte libvirtd
// sends once it has checked that certificate (1 = accepted). It replaces
// go-libvirt's TLS dialer, which puts no deadline on that byte (a daemon
// that never sends it holds the dial forever) and returns errors that do
// not say which file or which side is at fault. The whole dial, handshake
// and byte included, is bounded by the dial timeout.
type tlsDialer struct {
	addr     string
	host     string
	timeout  time.Duration
	noVerify bool
	// Where the three files were looked for, in order, as libvirt looks:
	// pkipath when set; else ~/.pki/libvirt for non-root users, then the
	// system locations.
	caPaths, certPaths, keyPaths []string
	pkiSet                       bool
	// PEM text given as values (tls.ca_cert, tls.client_cert,
	// tls.client_key); each set one replaces its file.
	caPEM, certPEM, keyPEM string
}

func newTLSDialer(ep Endpoint, s Settings) *tlsDialer {
	d := &tlsDialer{
		addr:     net.JoinHostPort(ep.Host, ep.Port),
		host:     ep.Host,
		timeout:  s.DialTimeout,
		noVerify: s.TLS.NoVerify || !s.TLS.NoVerifySet && ep.Params.Get("no_verify") == "1",
		caPEM:    s.TLS.CACert,
		certPEM:  s.TLS.ClientCert,
		keyPEM:   s.TLS.ClientKey,
	}
	if p := firstNonEmpty(s.TLS.PKIPath, ep.Params.Get("pkipath")); p != "" {
		p = expandHome(p)
		d.pkiSet = true
		d.caPaths = []string{filepath.Join(p, "cacert.pem")}
		d.certPaths = []string{filepath.Join(p, "clientcert.pem")}
		d.keyPaths = []string{filepath.Join(p, "clientkey.pem")}
		return d
	}
	if u, err := user.Current(); err == nil && u.Uid != "0" && u.HomeDir != "" {
		dir := filepath.Join(u.HomeDir, ".pki", "libvirt")
		d.caPaths = append(d.caPaths, filepath.Join(dir, "cacert.pem"))
		d.certPaths = append(d.certPaths, filepath.Join(dir, "clientcert.pem"))
		d.keyPaths = append(d.keyPaths, filepath.Join(dir, "clientkey.pem"))
	}
	d.caPaths = append(d.caPaths, "/etc/pki/CA/cacert.pem")
	d.certPaths = append(d.certPaths, "/etc/pki/libvirt/clientcert.pem")
	d.keyPaths = append(d.keyPaths, "/etc/pki/libvirt/private/clientkey.pem")
	return d
}

// firstFile returns the first of paths that exists.
func (d *tlsDialer) firstFile(what string, paths []string) (string, error) {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	how := "set tls.pki_path (or the URI's pkipath parameter) to the directory that holds cacert.pem, clientcert.pem and clientkey.pem"
	if d.pkiSet {
		how = "put it there, or point tls.pki_path (or the URI's pkipath parameter) at the directory that holds cacert.pem, clientcert.pem and clientkey.pem"
	}
	how += ", or give the PEM text as a value (tls.ca_cert, tls.client_cert, tls.client_key, or the KOHAKU_TLS_CA_CERT, KOHAKU_TLS_CLIENT_CERT, KOHAKU_TLS_CLIENT_KEY environment variables)"
	return "", &TLSError{Msg: fmt.Sprintf("the TLS %s is missing: looked for %s; %s", what, strings.Join(paths, ", "), how)}
}

// tlsFiles names what a dial used, for its errors.
type tlsFiles struct {
	cert     string // client certificate file
	certInfo string // its subject and issuer
	ca       string // CA file ("" with no_verify)
}

// config reads the values or files and returns the TLS configuration and
// where each part came from.
func (d *tlsDialer) config() (*tls.Config, tlsFiles, error) {
	var none tlsFiles
	certPEM, certFile, err := d.material("client certificate clientcert.pem", "tls.client_cert", d.certPEM, d.certPaths)
	if err != nil {
		return nil, none, err
	}
	keyPEM, keyFile, err := d.material("client key clientkey.pem", "tls.client_key", d.keyPEM, d.keyPaths)
	if err != nil {
		return nil, none, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, none, &TLSError{Msg: fmt.Sprintf("the TLS client certificate %s and key %s cannot be used together", certFile, keyFile), Err: errors.New(keyPairReason(err))}
	}
	cfg := &tls.Config{
		Certificates:       []tls.Certificate{cert},
		ServerName:         d.host,
		InsecureSkipVerify: d.noVerify, //nolint:gosec // the user asked for it, documented as insecure
		MinVersion:         tls.VersionTLS12,
	}
	caFile := ""
	if !d.noVerify {
		var caPEM []byte
		if caPEM, caFile, err = d.material("CA certificate cacert.pem", "tls.ca_cert", d.caPEM, d.caPaths); err != nil {
			return nil, none, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, none, &TLSError{Msg: fmt.Sprintf("the TLS CA %s holds no PEM certificate: give the text from -----BEGIN CERTIFICATE----- to -----END CERTIFICATE-----", caFile)}
		}
		cfg.RootCAs = pool
	}
	return cfg, tlsFiles{cert: certFile, certInfo: describeCert(certPEM), ca: caFile}, nil
}

// material returns a value when it is set (named by attr), else the first
// of paths that exists, read. The second result names where it came from.
func (d *tlsDialer) material(what, attr, value string, paths []string) ([]byte, string, error) {
	if value != "" {
		return []byte(value), attr, nil
	}
	file, err := d.firstFile(what, paths)
	if err != nil {
		return nil, "", err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, "", &TLSError{Msg: "reading the TLS " + what + " " + file, Err: err}
	}
	return b, file, nil
}

// keyPairReason is crypto/tls's key pair error: its messages name what is
// wrong and never contain the key's bytes.
func keyPairReason(err error) string { return err.Error() }

// describeCert names a PEM certificate's subject and issuer.
func describeCert(b []byte) string {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return ""
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("subject %s, issued by %s", c.Subject, c.Issuer)
}

func (d *tlsDialer) Dial() (net.Conn, error) {
	cfg, files, err := d.config()
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(d.timeout)
	raw, err := (&net.Dialer{Deadline: deadline}).Dial("tcp", d.addr)
	if err != nil {
		return nil, err // a *net.OpError: the connection error adds the hint
	}
	c := tls.Client(raw, cfg)
	_ = c.SetDeadline(deadline)
	fail := func(e error) (net.Conn, error) {
		c.Close()
		return nil, e
	}
	if err := c.Handshake(); err != nil {
		return fail(d.handshakeError(err, files.ca))
	}
	// libvirtd checks our certificate after the handshake and sends 1 when
	// it accepts it; otherwise it closes the session.
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 1 {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fail(&TLSError{Msg: fmt.Sprintf("libvirtd on %s finished the TLS handshake but did not confirm our client certificate within %s", d.addr, d.timeout), Err: err})
		}
		if err == nil {
			err = fmt.Errorf("libvirtd answered %d", b[0])
		}
		return fail(d.refused(files, err))
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

func (d *tlsDialer) refused(f tlsFiles, err error) error {
	certFile, certInfo := f.cert, f.certInfo
	if certInfo != "" {
		certInfo = " (" + certInfo + ")"
	}
	return &TLSError{Msg: fmt.Sprintf("libvirtd refused the client certificate %s%s after the TLS handshake: it "+
		"must be signed by the CA in libvirtd's ca_file (on the host, /etc/pki/CA/cacert.pem by default), be "+
		"valid now, and match tls_allowed_dn_list if libvirtd.conf sets one", certFile, certInfo), Err: err}
}

func (d *tlsDialer) handshakeError(err error, caFile string) error {
	var unknown x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var alert tls.AlertError
	switch {
	case errors.As(err, &unknown):
		return &TLSError{Msg: fmt.Sprintf("the TLS certificate of %s is not trusted: it is not signed by the CA "+
			"in %s. Put the CA that signed libvirtd's servercert.pem there (or set tls.no_verify = true, which "+
			"is insecure)", d.addr, caFile), Err: err}
	case errors.As(err, &hostErr):
		return &TLSError{Msg: fmt.Sprintf("the TLS certificate of %s is not valid for the name %q in the URI: "+
			"connect with a name the certificate holds, or reissue libvirtd's servercert.pem with that name in "+
			"its subjectAltName", d.addr, d.host), Err: err}
	case errors.As(err, &invalid):
		return &TLSError{Msg: fmt.Sprintf("the TLS certificate of %s is not valid", d.addr), Err: err}
	case errors.As(err, &alert):
		return &TLSError{Msg: fmt.Sprintf("libvirtd on %s ended the TLS handshake: it refused our client certificate or our TLS settings", d.addr), Err: err}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &TLSError{Msg: fmt.Sprintf("%s accepted the connection but did not complete a TLS handshake within %s: is it libvirtd's TLS port (tls_port, 16514 by default)?", d.addr, d.timeout), Err: err}
	}
	return &TLSError{Msg: fmt.Sprintf("the TLS handshake with %s failed: is it libvirtd's TLS port (tls_port, 16514 by default)?", d.addr), Err: err}
}
