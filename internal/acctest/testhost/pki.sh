#!/usr/bin/env bash
# pki.sh DIR: the throwaway PKI for the test host's libvirtd TLS listener,
# made anew in DIR (testhost.sh up runs it once, when DIR lacks a file): a CA,
# a server certificate for 127.0.0.1/localhost, a client certificate, and a
# "stranger" client certificate signed by a CA libvirtd does not trust. RSA
# keys and the key usages libvirt's certificate checks insist on.
# client/ holds what a client needs (cacert.pem, clientcert.pem, clientkey.pem:
# libvirt's pkipath layout); stranger/ the same with the stranger's certificate.
set -euo pipefail

d=$1
ca() { # dir cn
	openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$2" \
		-keyout "$1/cakey.pem" -out "$1/cacert.pem" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}
issue() { # ca-dir out-dir name cn extensions
	openssl req -newkey rsa:2048 -nodes -subj "/CN=$4" -keyout "$2/$3key.pem" -out "$2/$3.csr" 2>/dev/null
	printf '%s\n' "$5" | tr ';' '\n' >"$2/$3.ext"
	openssl x509 -req -in "$2/$3.csr" -CA "$1/cacert.pem" -CAkey "$1/cakey.pem" -CAcreateserial \
		-days 3650 -extfile "$2/$3.ext" -out "$2/$3cert.pem" 2>/dev/null
	rm -f "$2/$3.csr" "$2/$3.ext"
}

rm -rf "$d"
mkdir -p "$d"/{ca,server,client,stranger,stranger-ca}
chmod 700 "$d"
leaf="basicConstraints=critical,CA:FALSE;keyUsage=critical,digitalSignature,keyEncipherment"
ca "$d/ca" "Kohaku throwaway test CA"
ca "$d/stranger-ca" "Kohaku stranger CA"
issue "$d/ca" "$d/server" server 127.0.0.1 "$leaf;extendedKeyUsage=serverAuth;subjectAltName=IP:127.0.0.1,DNS:localhost"
issue "$d/ca" "$d/client" client kohaku-acc-client "$leaf;extendedKeyUsage=clientAuth"
issue "$d/stranger-ca" "$d/stranger" client kohaku-stranger "$leaf;extendedKeyUsage=clientAuth"
cp "$d/ca/cacert.pem" "$d/client/cacert.pem"
cp "$d/ca/cacert.pem" "$d/stranger/cacert.pem" # trusts the server; the server does not trust it
