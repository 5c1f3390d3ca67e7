package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/klog/v2"

	"github.com/ipfailover/ipfailover/internal/component"
)

var pods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// fieldSelector leaves out the pods that run no keepalived: those not
// scheduled yet and those that ended (an evicted pod, or a deleted one once
// its containers stopped). The API server filters, and a pod that leaves
// the selection arrives as a deletion.
const fieldSelector = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"

// revisionLabels are the labels that differ between the revisions of one
// workload; the selector leaves them out, so that during a rollout the old
// pods and the new ones see each other.
var revisionLabels = []string{
	"pod-template-hash",                  // Deployment (ReplicaSet)
	"controller-revision-hash",           // DaemonSet, StatefulSet
	"pod-template-generation",            // DaemonSet
	"statefulset.kubernetes.io/pod-name", // StatefulSet
	"apps.kubernetes.io/pod-index",       // StatefulSet
	"deployment",                         // OpenShift DeploymentConfig: <name>-<revision>
}

// ServiceAccountNamespace is where the kubelet puts the pod's namespace when
// it mounts the service account token.
const ServiceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Namespace is POD_NAMESPACE when it is set, else the namespace of the
// mounted service account token.
func Namespace(fromEnv string) (string, error) {
	if fromEnv != "" {
		return fromEnv, nil
	}
	b, err := os.ReadFile(ServiceAccountNamespace)
	if err != nil {
		return "", fmt.Errorf("POD_NAMESPACE is not set and the service account's namespace cannot be read: %w (set POD_NAMESPACE from the Downward API, fieldRef metadata.namespace)", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Client reads and patches pods' metadata, over connections it can close.
type Client struct {
	metadata.Interface
	// Events writes events (Events).
	Events *EventsClient
	dialer *connrotation.Dialer
}

// NewClient connects to the API server from inside a pod, with its service
// account token. It reads pods' metadata only.
func NewClient(userAgent string) (*Client, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no way to the API server: %w (OPENSHIFT_HA_UNICAST_PEERS_FROM=pods needs the service account token: automountServiceAccountToken: true)", err)
	}
	cfg.UserAgent = userAgent
	return clientFor(cfg)
}

// dialTimeout bounds a connection's set-up to the API server. client-go's
// 30 s lets one connection attempt whose SYN went unanswered (the
// kubernetes Service's rules being rewritten as the API server comes back)
// hold the watch for that long, while the next attempt would have
// connected in milliseconds.
const dialTimeout = 5 * time.Second

func clientFor(cfg *rest.Config) (*Client, error) {
	d := connrotation.NewDialer((&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext)
	cfg.Dial = d.DialContext
	m, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ev, err := NewEventsClient(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{Interface: m, Events: ev, dialer: d}, nil
}

// CloseConnections closes every connection to the API server; the next
// requests dial again. A connection from an address the node no longer has
// does not fail by itself: it stalls until HTTP/2's ping gives up (about
// 45 s), and every request on it (the watch, publishing the new address)
// with it.
func (c *Client) CloseConnections() { c.dialer.CloseAll() }

// Options configure a Watcher.
type Options struct {
	// Client reads and patches pods (NewClient; a fake in tests).
	Client metadata.Interface
	// Reconnect closes the client's connections (Client.CloseConnections);
	// nil does nothing.
	Reconnect func()
	// Namespace and Pod name this pod.
	Namespace, Pod string
	Logger         *slog.Logger
	// Retry is the pause between attempts to read or patch this pod while
	// the API server refuses; default 2 s. A request that got no answer is
	// tried again once after quickRetry first.
	Retry time.Duration
	// Hold is how long an address that leaves the peers stays one;
	// default PeerHold.
	Hold time.Duration
	// Adverts is the VRRP this pod's keepalived speaks, published with
	// the address (AdvertsAnnotation, and FastAnnotation for VRRPv3).
	Adverts Adverts
}

// Health is the state of the API server connection.
type Health struct {
	// Up is false from a failed request (a list, a watch, reading or
	// patching this pod) until the next one succeeds.
	Up bool
	// Errors counts the failed requests.
	Errors uint64
	// Since is when Up last changed.
	Since time.Time
	// Err is the last failure.
	Err error
}

// Watcher follows the pods of this pod's workload.
type Watcher struct {
	client    metadata.Interface
	reconnect func()
	namespace string
	pod       string
	log       *slog.Logger
	retry     time.Duration
	hold      time.Duration
	adverts   Adverts

	changes chan struct{}

	mu sync.Mutex
	// held are the addresses held as peers after they left (View.Held),
	// and until when; expire updates the view when the first hold ends.
	held      map[netip.Addr]time.Time
	expire    *time.Timer
	selector  string
	published string
	view      View
	// inf is the watch Prepare set up; store is its store while it runs.
	inf    cache.SharedIndexInformer
	store  cache.Store
	health Health
}

// New returns a Watcher; Start starts it.
func New(o Options) *Watcher {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Retry <= 0 {
		o.Retry = 2 * time.Second
	}
	if o.Hold <= 0 {
		o.Hold = PeerHold
	}
	if o.Reconnect == nil {
		o.Reconnect = func() {}
	}
	return &Watcher{
		client: o.Client, reconnect: o.Reconnect, hold: o.Hold, namespace: o.Namespace, pod: o.Pod, log: o.Logger, retry: o.Retry, adverts: o.Adverts,
		changes: make(chan struct{}, 1),
		health:  Health{Up: true, Since: time.Now()},
	}
}

// Prepare reads this pod's labels (the workload's selector), publishes
// addrs on it, and sets up the watch of the workload that Run runs. While
// the API server cannot be reached it keeps trying, until ctx ends.
func (w *Watcher) Prepare(ctx context.Context, addrs []netip.Addr) error {
	// client-go's own log lines (the reflector's) go to this logger.
	klog.SetSlogLogger(w.log.With("component", "client-go"))
	sel, err := w.workloadSelector(ctx)
	if err != nil {
		return err
	}
	if err := w.Publish(ctx, addrs); err != nil {
		return err
	}
	lw := cache.ToListWatcherWithWatchListSemantics(w.listWatch(sel), w.client)
	inf := cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
	if err := inf.SetTransform(stripManagedFields); err != nil {
		return err
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		// A watch that outlived the API server's history ends with 410
		// Gone; the informer lists again at once. Not a failure.
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return
		}
		w.failed(err)
	}); err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.safeUpdate() },
		UpdateFunc: func(any, any) { w.safeUpdate() },
		DeleteFunc: func(any) { w.safeUpdate() },
	}); err != nil {
		return err
	}
	w.mu.Lock()
	w.store = inf.GetStore()
	w.inf = inf
	w.mu.Unlock()
	return nil
}

// Run watches the workload's pods until ctx ends (Prepare first). The
// informer's goroutines, and the timer that ends a peer's hold, end with
// it.
func (w *Watcher) Run(ctx context.Context) error {
	w.mu.Lock()
	inf := w.inf
	w.mu.Unlock()
	if inf == nil {
		return errors.New("membership: Run before Prepare")
	}
	inf.RunWithContext(ctx)
	w.mu.Lock()
	w.store = nil
	if w.expire != nil {
		w.expire.Stop()
	}
	w.mu.Unlock()
	return nil
}

// Synced returns once Run's watch has listed every pod and shows this
// pod's address, so that the others list this pod before its keepalived
// starts.
func (w *Watcher) Synced(ctx context.Context) error {
	w.mu.Lock()
	inf := w.inf
	w.mu.Unlock()
	if inf == nil {
		return errors.New("membership: Synced before Prepare")
	}
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	w.update()
	w.log.Info("watching the workload's pods", "namespace", w.namespace, "selector", w.Selector())
	// The others' watches carry this pod's address about when this one
	// does: wait for it, briefly.
	deadline := time.Now().Add(10 * time.Second)
	for !w.showsSelf() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Changes gets a value after every change of the view (values coalesce);
// View returns the view.
func (w *Watcher) Changes() <-chan struct{} { return w.changes }

// View is the workload's pods as the watch sees them now.
func (w *Watcher) View() View {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.view
}

// Selector is the label selector of the workload ("" before Start found it).
func (w *Watcher) Selector() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.selector
}

// Health is the state of the connection to the API server.
func (w *Watcher) Health() Health {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.health
}

// Publish sets this pod's Annotation to addrs, with AdvertsAnnotation and,
// for VRRPv3, FastAnnotation (Options.Adverts), unless it has them
// already. It retries until it succeeds or ctx ends.
func (w *Watcher) Publish(ctx context.Context, addrs []netip.Addr) error {
	value := FormatAddrs(addrs)
	w.mu.Lock()
	same := w.published == value
	w.mu.Unlock()
	if same {
		return nil
	}
	annotations := map[string]any{Annotation: value, FastAnnotation: nil, AdvertsAnnotation: nil}
	if w.adverts.Version == 3 {
		annotations[FastAnnotation] = FastValue
	}
	if w.adverts.Version != 0 {
		annotations[AdvertsAnnotation] = w.adverts.String()
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	err = w.retrying(ctx, "publishing this pod's address", func() error {
		_, err := w.client.Resource(pods).Namespace(w.namespace).Patch(ctx, w.pod, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.published = value
	w.mu.Unlock()
	w.log.Info("published this pod's unicast address", "pod", w.pod, "annotation", Annotation, "addresses", value, "adverts", w.adverts.String())
	return nil
}

// Renumbered publishes addrs, this node's new addresses, over new
// connections: the open ones leave from an address the node may no longer
// have. The watch dials again too, and lists again if its history is gone.
func (w *Watcher) Renumbered(ctx context.Context, addrs []netip.Addr) error {
	w.reconnect()
	return w.Publish(ctx, addrs)
}

// workloadSelector reads this pod and makes the selector of its workload.
func (w *Watcher) workloadSelector(ctx context.Context) (string, error) {
	var self *metav1.PartialObjectMetadata
	err := w.retrying(ctx, "reading this pod", func() error {
		var err error
		self, err = w.client.Resource(pods).Namespace(w.namespace).Get(ctx, w.pod, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return "", err
	}
	sel, err := selectorOf(self)
	if err != nil {
		return "", err
	}
	w.mu.Lock()
	w.selector = sel
	if w.publishes(self.Annotations) {
		w.published = self.Annotations[Annotation]
	}
	w.mu.Unlock()
	return sel, nil
}

// publishes says whether annotations carry what Publish sets beside the
// address. w.mu is held.
func (w *Watcher) publishes(annotations map[string]string) bool {
	fast := annotations[FastAnnotation] == FastValue
	return fast == (w.adverts.Version == 3) && annotations[AdvertsAnnotation] == w.adverts.String()
}

// selectorOf is the label selector of a pod's workload: its labels but the
// revision labels.
func selectorOf(self *metav1.PartialObjectMetadata) (string, error) {
	set := labels.Set{}
	for k, v := range self.Labels {
		if !isRevisionLabel(k) {
			set[k] = v
		}
	}
	if len(set) == 0 {
		return "", fmt.Errorf("pod %s/%s has no labels to find its workload's other pods by (the revision labels %s do not count)", self.Namespace, self.Name, strings.Join(revisionLabels, ", "))
	}
	return labels.SelectorFromSet(set).String(), nil
}

// Look reads pod and lists the pods of its workload once, for commands
// that do not watch (render, peers). It does not retry.
func Look(ctx context.Context, client metadata.Interface, namespace, pod string) (View, string, error) {
	res := client.Resource(pods).Namespace(namespace)
	self, err := res.Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return View{}, "", fmt.Errorf("reading this pod (%s/%s): %w", namespace, pod, err)
	}
	sel, err := selectorOf(self)
	if err != nil {
		return View{}, "", err
	}
	list, err := res.List(ctx, metav1.ListOptions{LabelSelector: sel, FieldSelector: fieldSelector})
	if err != nil {
		return View{}, sel, fmt.Errorf("listing the pods of %s in %s: %w", sel, namespace, err)
	}
	ps := make([]*metav1.PartialObjectMetadata, len(list.Items))
	for i := range list.Items {
		ps[i] = &list.Items[i]
	}
	return viewOf(ps, pod), sel, nil
}

func isRevisionLabel(k string) bool {
	for _, r := range revisionLabels {
		if k == r {
			return true
		}
	}
	return false
}

// listWatch lists and watches the workload's pods, and counts every
// request as the API server being reachable or not. The reflector retries
// a watch the API server refused (connection refused, too many requests)
// by itself, without telling the watch error handler: these requests are
// the only sign of an API server that went away. While the API server
// cannot be reached at all, the list and the watch try again every Retry
// themselves: the reflector's own backoff grows to 30 s and more (jitter),
// and after minutes away the pods would follow the workload again only a
// minute after the API server came back.
func (w *Watcher) listWatch(selector string) *cache.ListWatch {
	res := w.client.Resource(pods).Namespace(w.namespace)
	narrow := func(o metav1.ListOptions) metav1.ListOptions {
		o.LabelSelector, o.FieldSelector = selector, fieldSelector
		return o
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return untilAnswered(ctx, w, "listing the workload's pods", func() (runtime.Object, error) {
				return res.List(ctx, narrow(o))
			})
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return untilAnswered(ctx, w, "watching the workload's pods", func() (watch.Interface, error) {
				return res.Watch(ctx, narrow(o))
			})
		},
	}
}

// untilAnswered runs a request of the watch until the API server answers
// it (with a result or an error of its own) or ctx ends, every Retry (see
// pause).
func untilAnswered[T any](ctx context.Context, w *Watcher, what string, request func() (T, error)) (T, error) {
	for tries := 1; ; tries++ {
		v, err := request()
		w.requested(what, err)
		if err == nil || answered(err) || ctx.Err() != nil {
			return v, err
		}
		if !w.pause(ctx, tries, err) {
			return v, err
		}
	}
}

// answered says whether err came from the API server itself (a status: too
// old a resource version, too many requests, forbidden...), which the
// reflector handles, rather than from not reaching it.
func answered(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

// requested counts the outcome of one of the watch's requests.
func (w *Watcher) requested(what string, err error) {
	switch {
	case err == nil:
		w.reachable()
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		// The watch outlived the API server's history: it answers.
		w.reachable()
	case errors.Is(err, context.Canceled):
		// The watch is being stopped.
	default:
		w.failed(fmt.Errorf("%s (%s, %s): %w", what, w.namespace, w.Selector(), err))
	}
}

// retrying runs fn until it succeeds or ctx ends, a retry apart (see
// pause), keeping the health up to date.
func (w *Watcher) retrying(ctx context.Context, what string, fn func() error) error {
	for tries := 1; ; tries++ {
		err := fn()
		if err == nil {
			w.reachable()
			return nil
		}
		w.failed(fmt.Errorf("%s (%s/%s): %w", what, w.namespace, w.pod, err))
		if !w.pause(ctx, tries, err) {
			return errors.Join(ctx.Err(), err)
		}
	}
}

// quickRetry is the pause after the first failure of a request that got
// no answer: a request that went out on a connection just closed (this
// node's address changed and Renumbered closed them all, or the API server
// closed it) fails at once, and the transport, which has dropped the
// connection since, dials again.
const quickRetry = 50 * time.Millisecond

// pause waits before another try of a request that failed tries times in a
// row with err: quickRetry after a first failure without an answer from
// the API server, Retry otherwise. It reports false when ctx ended first.
func (w *Watcher) pause(ctx context.Context, tries int, err error) bool {
	d := w.retry
	if tries == 1 && !answered(err) && quickRetry < d {
		d = quickRetry
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (w *Watcher) failed(err error) {
	w.mu.Lock()
	h := &w.health
	h.Errors++
	// Once per outage: each retry's error names another source port.
	first := h.Up
	if h.Up {
		h.Up, h.Since = false, time.Now()
	}
	h.Err = err
	w.mu.Unlock()
	if first {
		w.log.Warn("API server request failed; the peers stay as they are until it answers", "error", err)
	}
}

func (w *Watcher) reachable() {
	w.mu.Lock()
	h := &w.health
	was, down := h.Up, h.Since
	if !was {
		h.Up, h.Since = true, time.Now()
	}
	w.mu.Unlock()
	if !was {
		w.log.Info("API server answers again", "unreachable_since", down, "for", time.Since(down).Round(time.Millisecond))
		// Holds that ended meanwhile end now.
		w.safeUpdate()
	}
}

// safeUpdate is update for client-go's handlers, which re-panic: a pod
// object that update cannot handle (a bug) counts as a failed request and
// leaves the view as it was, instead of ending PID 1.
func (w *Watcher) safeUpdate() {
	if err := component.Safe("reading the workload's pods", func() error { w.update(); return nil }); err != nil {
		w.failed(err)
	}
}

// update recomputes the view from the informer's store and signals a
// change.
func (w *Watcher) update() {
	if w.recompute() {
		select {
		case w.changes <- struct{}{}:
		default:
		}
	}
}

// recompute sets the view from the store; it reports whether it changed.
func (w *Watcher) recompute() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.store == nil {
		return false
	}
	objs := w.store.List()
	podsNow := make([]*metav1.PartialObjectMetadata, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*metav1.PartialObjectMetadata); ok {
			podsNow = append(podsNow, p)
		}
	}
	v := viewOf(podsNow, w.pod)
	w.holdDeparted(&v)
	changed := !v.Equal(w.view)
	w.view = v
	return changed
}

// PeerHold is how long an address that leaves the peers (its pod went, or
// renumbered) stays one (Options.Hold).
//
// Every change of keepalived's peer list is a reload, and a reload restarts
// the master-down timer of each of keepalived's backups: a master that died
// within the master-down interval before another node's reload leaves its
// VIPs unanswered that much longer (3.53 s for 3.11 s at a node's death
// 0.4 s before a reload that dropped a drained pod, chaos seed 3 on the
// test cluster). Dropping an address that went buys nothing: its VIPs
// were handed over by its goodbye or taken at the master-down timer, and
// adverts sent to it are lost harmlessly. So the address is kept for a
// while: a pod that comes back with it (deleted and replaced, drained and
// uncordoned, evicted while the API server was away, a node rebooted, a
// rollout) costs no reload at all, on the others or for the VIPs, where
// the immediate drop reloaded every node twice and moved VIPs twice as the
// members were ranked again. A renumbered pod's former address stays in
// the others' lists the same way, so that the goodbye its keepalived sends
// from it as it recreates its instances is heard (the others' watches are
// faster than its reload). One minute covers a replaced pod and a drained
// node's short maintenance; after it, the address goes in one reload.
const PeerHold = time.Minute

// holdDeparted sets v.Held: the addresses of the last view's peers that
// v's members no longer have, each until its hold ends, and arranges an
// update for when the first hold ends. w.mu is held.
func (w *Watcher) holdDeparted(v *View) {
	now := time.Now()
	live := map[netip.Addr]bool{}
	for _, a := range v.Peers() {
		live[a] = true
	}
	for _, m := range v.Members {
		if m.Self {
			for _, a := range m.Addrs {
				live[a] = true
			}
		}
	}
	// The last view's peers, with the pod that published each and what
	// it said it speaks.
	type publisher struct {
		pod     string
		adverts Adverts
	}
	last := map[netip.Addr]publisher{}
	for _, m := range w.view.Members {
		if m.In && !m.Self {
			for _, a := range m.Addrs {
				last[a] = publisher{m.Pod, m.Adverts}
			}
		}
	}
	for _, h := range w.view.Held {
		if _, ok := last[h.Addr]; !ok {
			last[h.Addr] = publisher{h.Pod, h.Adverts}
		}
	}
	held := map[netip.Addr]time.Time{}
	var next time.Time
	for a, p := range last {
		if live[a] {
			continue
		}
		until, ok := w.held[a]
		if !ok {
			until = now.Add(w.hold)
			w.log.Info("a peer's address left the workload: held as a peer, keepalived not reloaded for it", "address", a, "pod", p.pod, "for", w.hold)
		}
		// While the API server does not answer, the view is as old as
		// the outage: a hold that ends then lasts until it answers, so
		// that an unreachable API server changes nothing by itself.
		if !until.After(now) && w.health.Up {
			continue
		}
		held[a] = until
		v.Held = append(v.Held, Held{Addr: a, Pod: p.pod, Adverts: p.adverts, Until: until})
		if until.After(now) && (next.IsZero() || until.Before(next)) {
			next = until
		}
	}
	slices.SortFunc(v.Held, func(a, b Held) int { return a.Addr.Compare(b.Addr) })
	w.held = held
	if !next.IsZero() {
		if w.expire != nil {
			w.expire.Stop()
		}
		w.expire = time.AfterFunc(time.Until(next)+time.Millisecond, w.safeUpdate)
	}
}

// showsSelf says whether the view has this pod with its published address.
func (w *Watcher) showsSelf() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.view.Members {
		if m.Self {
			return FormatAddrs(m.Addrs) == w.published
		}
	}
	return false
}

func stripManagedFields(obj any) (any, error) {
	if a, ok := obj.(metav1.Object); ok {
		a.SetManagedFields(nil)
	}
	return obj, nil
}
