package dashboard

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// apiServer is the part of a Kubernetes API server that pods with
// OPENSHIFT_HA_UNICAST_PEERS_FROM=pods use, over HTTPS: reading one pod,
// patching its annotations (a merge patch), and listing and watching the
// pods of a label selector, as metadata (PartialObjectMetadata), with
// watch-list (sendInitialEvents) and plain watches from a resource
// version. Anything else gets 404. It holds the pods it was given; the
// pods publish their addresses on them, and so find each other.
type apiServer struct {
	srv *http.Server
	// secrets is the directory of the service account's token and CA
	// certificate, as a pod mounts them.
	secrets string

	mu sync.Mutex
	rv int
	// pods by name; history is every change, in order, for watches from a
	// resource version.
	pods     map[string]*metav1.PartialObjectMetadata
	history  []watchEvent
	watchers map[chan watchEvent]struct{}
}

// watchEvent is one event of a watch; rv is the resource version of the
// change.
type watchEvent struct {
	Type   string                        `json:"type"`
	Object *metav1.PartialObjectMetadata `json:"object"`
	rv     int
}

// podNamespace is where the fake's pods are.
const podNamespace = "ipfailover"

// podLabels are the labels of every pod: the workload's, and a revision
// label the pods leave out of their selector.
var podLabels = map[string]string{"ipfailover": "ipfailover", "app.kubernetes.io/name": "ipfailover", "pod-template-hash": "lab"}

// newAPIServer serves the pods named on ln (the lab's host namespace),
// with a certificate for addr; its token and CA certificate are written
// under dir.
func newAPIServer(ln net.Listener, addr netip.Addr, dir string, pods ...string) (*apiServer, error) {
	cert, caPEM, err := selfSigned(addr)
	if err != nil {
		return nil, err
	}
	a := &apiServer{
		secrets:  filepath.Join(dir, "serviceaccount"),
		pods:     map[string]*metav1.PartialObjectMetadata{},
		watchers: map[chan watchEvent]struct{}{},
	}
	if err := os.MkdirAll(a.secrets, 0o755); err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{"ca.crt": caPEM, "token": []byte("lab-token"), "namespace": []byte(podNamespace)} {
		if err := os.WriteFile(filepath.Join(a.secrets, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	for i, name := range pods {
		a.rv++
		a.pods[name] = &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: podNamespace, UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i+1)),
			Labels: podLabels, ResourceVersion: strconv.Itoa(a.rv), CreationTimestamp: metav1.Now(),
		}}
	}
	a.srv = &http.Server{
		Handler:           http.HandlerFunc(a.serve),
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	go func() { _ = a.srv.ServeTLS(ln, "", "") }()
	return a, nil
}

// Close stops serving and ends the watches.
func (a *apiServer) Close() {
	_ = a.srv.Close()
	a.mu.Lock()
	defer a.mu.Unlock()
	for ch := range a.watchers {
		close(ch)
		delete(a.watchers, ch)
	}
}

// selfSigned is a certificate for addr that is its own CA, and its PEM.
func selfSigned(addr netip.Addr) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "lab API server"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{addr.AsSlice()},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return cert, certPEM, err
}

// metadata is a copy of p as the API server sends it.
func metadata(p *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	c := p.DeepCopy()
	c.TypeMeta = metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}
	return c
}

func (a *apiServer) serve(w http.ResponseWriter, r *http.Request) {
	prefix := "/api/v1/namespaces/" + podNamespace + "/pods"
	rest, ok := strings.CutPrefix(r.URL.Path, prefix)
	switch {
	case ok && rest == "" && r.Method == http.MethodGet:
		if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
			a.watch(w, r)
			return
		}
		a.list(w, r)
	case ok && strings.HasPrefix(rest, "/") && r.Method == http.MethodGet:
		a.mu.Lock()
		p := a.pods[rest[1:]]
		var out *metav1.PartialObjectMetadata
		if p != nil {
			out = metadata(p)
		}
		a.mu.Unlock()
		if out == nil {
			notFound(w, r)
			return
		}
		writeJSON(w, http.StatusOK, out)
	case ok && strings.HasPrefix(rest, "/") && r.Method == http.MethodPatch:
		a.patch(w, r, rest[1:])
	default:
		notFound(w, r)
	}
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusNotFound, &metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
		Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: r.Method + " " + r.URL.Path + ": not served by the lab's API server",
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// selected returns the pods the request's label selector matches, sorted
// by name.
func (a *apiServer) selected(r *http.Request) ([]*metav1.PartialObjectMetadata, error) {
	sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
	if err != nil {
		return nil, err
	}
	var out []*metav1.PartialObjectMetadata
	for _, p := range a.pods {
		if sel.Matches(labels.Set(p.Labels)) {
			out = append(out, metadata(p))
		}
	}
	slices.SortFunc(out, func(a, b *metav1.PartialObjectMetadata) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (a *apiServer) list(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	ps, err := a.selected(r)
	rv := a.rv
	a.mu.Unlock()
	if err != nil {
		writeJSON(w, http.StatusBadRequest, &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest, Message: err.Error()})
		return
	}
	list := &metav1.PartialObjectMetadataList{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"},
		ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(rv)},
	}
	for _, p := range ps {
		list.Items = append(list.Items, *p)
	}
	writeJSON(w, http.StatusOK, list)
}

// patch applies a merge patch of the pod's annotations (null removes one).
func (a *apiServer) patch(w http.ResponseWriter, r *http.Request, name string) {
	var body struct {
		Metadata struct {
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	b, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(b, &body)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest, Message: err.Error()})
		return
	}
	a.mu.Lock()
	p := a.pods[name]
	if p == nil {
		a.mu.Unlock()
		notFound(w, r)
		return
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	for k, v := range body.Metadata.Annotations {
		if v == nil {
			delete(p.Annotations, k)
		} else {
			p.Annotations[k] = *v
		}
	}
	a.rv++
	p.ResourceVersion = strconv.Itoa(a.rv)
	ev := watchEvent{Type: "MODIFIED", Object: metadata(p), rv: a.rv}
	a.history = append(a.history, ev)
	for ch := range a.watchers {
		select {
		case ch <- ev:
		default:
			// A watcher this far behind is ended; it watches again.
			close(ch)
			delete(a.watchers, ch)
		}
	}
	out := metadata(p)
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// watch streams the changes of the selected pods: with sendInitialEvents,
// every pod as ADDED and then the bookmark that ends them; otherwise the
// changes after the request's resource version.
func (a *apiServer) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest, Message: err.Error()})
		return
	}
	ch := make(chan watchEvent, 256)
	var first []watchEvent
	a.mu.Lock()
	if q.Get("sendInitialEvents") == "true" {
		ps, _ := a.selected(r)
		for _, p := range ps {
			first = append(first, watchEvent{Type: "ADDED", Object: p})
		}
		first = append(first, watchEvent{Type: "BOOKMARK", Object: &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
			ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(a.rv), Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}},
		}})
	} else {
		from, _ := strconv.Atoi(q.Get("resourceVersion"))
		for _, ev := range a.history {
			if ev.rv > from {
				first = append(first, ev)
			}
		}
	}
	a.watchers[ch] = struct{}{}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.watchers, ch)
		a.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	send := func(ev watchEvent) bool {
		if ev.Type != "BOOKMARK" && !sel.Matches(labels.Set(ev.Object.Labels)) {
			return true
		}
		if err := enc.Encode(ev); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	for _, ev := range first {
		if !send(ev) {
			return
		}
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-ch:
			if !ok || !send(ev) {
				return
			}
		}
	}
}
