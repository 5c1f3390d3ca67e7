package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// Event is one thing an operator should know about this pod, recorded as
// a Kubernetes Event (events.k8s.io/v1) on the pod: `kubectl describe pod`
// and `kubectl get events` show it.
type Event struct {
	// Warning makes it a Warning event; Normal otherwise.
	Warning bool
	// Reason is one CamelCase word (the EVENT REASON column), Action what
	// this pod did about it.
	Reason, Action string
	// Note is the line a person reads (at most 1 kB).
	Note string
}

// EventsOptions configure Events.
type EventsOptions struct {
	// Client writes the events; Pods reads this pod's uid, which
	// `kubectl describe pod` needs to find them: Client.Events and the
	// Client itself in a pod (NewClient).
	Client *EventsClient
	Pods   metadata.Interface
	// Namespace and Pod name this pod; Instance names this program on this
	// node (the events' reportingInstance: the node's name).
	Namespace, Pod, Instance string
	Logger                   *slog.Logger
	// Queue bounds the events waiting to be written (default 100); the
	// ones past it are dropped.
	Queue int
	// Burst events of one reason are written at once, then one every
	// Refill (default 10, 30 s): a flapping check cannot flood the API
	// server. The repeats of an event within SeriesWindow (default 6
	// min) count in one event (its series) instead.
	Burst        int
	Refill       time.Duration
	SeriesWindow time.Duration
	// Timeout bounds each request (default 3 s).
	Timeout time.Duration
}

// EventsClient writes events.k8s.io/v1 Events. It knows that one kind
// only, as JSON: client-go's typed clients bring every API group's types
// with them (twice this program's size), the Event type alone the core
// group's (a sixth).
type EventsClient struct {
	rest *rest.RESTClient
}

// eventsVersion is the API the Events are written to.
var eventsVersion = schema.GroupVersion{Group: "events.k8s.io", Version: "v1"}

// NewEventsClient returns an EventsClient for cfg's API server.
func NewEventsClient(cfg *rest.Config) (*EventsClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &eventsVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.NegotiatedSerializer = metainternalversionscheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &EventsClient{rest: rc}, nil
}

// event is the part of an events.k8s.io/v1 Event this program writes.
type event struct {
	metav1.TypeMeta     `json:",inline"`
	metav1.ObjectMeta   `json:"metadata"`
	EventTime           metav1.MicroTime `json:"eventTime"`
	ReportingController string           `json:"reportingController"`
	ReportingInstance   string           `json:"reportingInstance"`
	Action              string           `json:"action"`
	Reason              string           `json:"reason"`
	Regarding           objectReference  `json:"regarding"`
	Note                string           `json:"note,omitempty"`
	Type                string           `json:"type"`
}

// objectReference is the object an event is about.
type objectReference struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid,omitempty"`
}

// eventSeries is an event's repeats.
type eventSeries struct {
	Count            int32            `json:"count"`
	LastObservedTime metav1.MicroTime `json:"lastObservedTime"`
}

func (c *EventsClient) create(ctx context.Context, ev *event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return c.rest.Post().Namespace(ev.Namespace).Resource("events").Body(body).Do(ctx).Error()
}

func (c *EventsClient) patch(ctx context.Context, namespace, name string, s eventSeries) error {
	body, err := json.Marshal(map[string]eventSeries{"series": s})
	if err != nil {
		return err
	}
	return c.rest.Patch(types.MergePatchType).Namespace(namespace).Resource("events").Name(name).Body(body).Do(ctx).Error()
}

// ReportingController names this program in the events it writes.
const ReportingController = "ipfailover"

// Events writes Events from one goroutine (Run); Record never blocks.
// While the API server does not answer, events are dropped (the logs say
// so once per outage, and how many): an unreachable API server loses
// events, it never delays what recorded them.
type Events struct {
	o     EventsOptions
	queue chan recorded
	// overflow counts the events dropped because the queue was full,
	// until the writer reads it.
	overflow atomic.Int64
}

// recorded is an event and when it happened.
type recorded struct {
	Event
	at time.Time
}

// NewEvents returns Events; Run writes them.
func NewEvents(o EventsOptions) *Events {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Queue <= 0 {
		o.Queue = 100
	}
	if o.Burst <= 0 {
		o.Burst = 10
	}
	if o.Refill <= 0 {
		o.Refill = 30 * time.Second
	}
	if o.SeriesWindow <= 0 {
		o.SeriesWindow = 6 * time.Minute
	}
	if o.Timeout <= 0 {
		o.Timeout = 3 * time.Second
	}
	return &Events{o: o, queue: make(chan recorded, o.Queue)}
}

// Record queues ev; when the queue is full it is dropped (and counted).
// It never blocks; a nil Events drops every event.
func (e *Events) Record(ev Event) {
	if e == nil {
		return
	}
	select {
	case e.queue <- recorded{Event: ev, at: time.Now()}:
	default:
		e.overflow.Add(1)
	}
}

// series is an event written, and its repeats since.
type series struct {
	key, name, reason string
	count             int32
	// last is when it last happened; written says whether the API server
	// has the count.
	last    time.Time
	written bool
}

// bucket is one reason's allowance of writes.
type bucket struct {
	tokens float64
	at     time.Time
}

// writer is Run's state.
type writer struct {
	*Events
	uid     types.UID
	uidAt   time.Time
	series  map[string]*series
	buckets map[string]*bucket
	// down is set from a request the API server did not answer until
	// one it answers; dropped counts the events lost meanwhile, tried
	// when the last request went out.
	down    bool
	dropped int
	tried   time.Time
	// limited counts, per reason, the events over its bound since the
	// last line that said so.
	limited map[string]int
	refused map[string]bool
	// overflowed counts the events the full queue dropped, since it
	// filled, until it drains.
	overflowed int64
}

// retryDown is how often a request is tried while the API server does
// not answer; the events in between are dropped without one.
const retryDown = 5 * time.Second

// drainTime bounds the writing of the events queued when Run is stopped
// (a pod's last ones: the VIPs it released as it stopped).
const drainTime = time.Second

// Run writes the recorded events until ctx ends, then what is queued for
// up to drainTime.
func (e *Events) Run(ctx context.Context) error {
	w := &writer{Events: e, series: map[string]*series{}, buckets: map[string]*bucket{}, limited: map[string]int{}, refused: map[string]bool{}}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			w.drain(ctx, nil)
			return nil
		case r := <-e.queue:
			if ctx.Err() != nil {
				w.drain(ctx, &r)
				return nil
			}
			w.write(ctx, r)
		case now := <-tick.C:
			w.flush(ctx, now)
		}
		w.overflowing()
	}
}

// drain writes first, if set, and the queued events, for up to drainTime
// after ctx ended.
func (w *writer) drain(ctx context.Context, first *recorded) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainTime)
	defer cancel()
	if first != nil {
		w.write(dctx, *first)
	}
	for dctx.Err() == nil && len(w.queue) > 0 {
		w.write(dctx, <-w.queue)
	}
}

func seriesKey(ev Event) string {
	return fmt.Sprint(ev.Warning, "\x00", ev.Reason, "\x00", ev.Action, "\x00", ev.Note)
}

// waiting says whether the API server did not answer the last request,
// tried less than retryDown before at: nothing is sent until then.
func (w *writer) waiting(at time.Time) bool {
	return w.down && at.Sub(w.tried) < retryDown
}

// take takes one of reason's writes, if it has one left.
func (w *writer) take(reason string, now time.Time) bool {
	b := w.buckets[reason]
	if b == nil {
		b = &bucket{tokens: float64(w.o.Burst), at: now}
		w.buckets[reason] = b
	}
	b.tokens = min(float64(w.o.Burst), b.tokens+float64(now.Sub(b.at))/float64(w.o.Refill))
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// write writes one event, or adds it to the series of its repeats.
func (w *writer) write(ctx context.Context, r recorded) {
	key := seriesKey(r.Event)
	if s := w.series[key]; s != nil && r.at.Sub(s.last) < w.o.SeriesWindow {
		s.count++
		s.last, s.written = r.at, false
		if !w.waiting(r.at) && w.take(r.Reason, r.at) {
			w.patch(ctx, r.Reason, s)
		}
		return
	}
	// An event lost to an outage leaves its reason's bound as it was.
	if w.waiting(r.at) {
		w.lost()
		return
	}
	if !w.take(r.Reason, r.at) {
		if w.limited[r.Reason] == 0 {
			w.o.Logger.Warn("events: over the bound of their reason; dropped until it refills", "reason", r.Reason,
				"bound", fmt.Sprintf("%d, then one every %s", w.o.Burst, w.o.Refill))
		}
		w.limited[r.Reason]++
		return
	}
	name := fmt.Sprintf("%s.%x", w.o.Pod, r.at.UnixNano())
	ev := &event{
		TypeMeta:            metav1.TypeMeta{APIVersion: eventsVersion.String(), Kind: "Event"},
		ObjectMeta:          metav1.ObjectMeta{Name: name, Namespace: w.o.Namespace},
		EventTime:           metav1.NewMicroTime(r.at),
		ReportingController: ReportingController,
		ReportingInstance:   w.o.Instance,
		Action:              r.Action,
		Reason:              r.Reason,
		Regarding:           w.regarding(ctx, r.at),
		Note:                clip(r.Note, 1024),
		Type:                "Normal",
	}
	if r.Warning {
		ev.Type = "Warning"
	}
	rctx, cancel := context.WithTimeout(ctx, w.o.Timeout)
	err := w.o.Client.create(rctx, ev)
	cancel()
	if !w.answered(r.Reason, err) {
		return
	}
	w.series[key] = &series{key: key, name: name, reason: r.Reason, count: 1, last: r.at, written: true}
}

// overflowing says when the queue starts dropping events, and how many it
// dropped once it drained.
func (w *writer) overflowing() {
	n := w.overflow.Swap(0)
	switch {
	case n > 0 && w.overflowed == 0:
		w.o.Logger.Warn("events: the queue is full (the API server is slow to answer); events are dropped")
	case n == 0 && w.overflowed > 0 && len(w.queue) == 0:
		w.o.Logger.Info("events: the queue drained", "dropped", w.overflowed)
		w.overflowed = 0
	}
	w.overflowed += n
}

// patch writes s's count.
func (w *writer) patch(ctx context.Context, reason string, s *series) {
	if w.waiting(time.Now()) {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, w.o.Timeout)
	err := w.o.Client.patch(rctx, w.o.Namespace, s.name, eventSeries{Count: s.count, LastObservedTime: metav1.NewMicroTime(s.last)})
	cancel()
	if apierrors.IsNotFound(err) {
		// The API server let the event expire (its --event-ttl): the
		// next repeat starts a new one.
		delete(w.series, s.key)
	}
	if w.answered(reason, err) {
		s.written = true
	}
}

// flush writes the counts of series not written yet that their reasons
// allow, forgets the series past the window, and says how many events
// the bounds dropped.
func (w *writer) flush(ctx context.Context, now time.Time) {
	for key, s := range w.series {
		if now.Sub(s.last) >= w.o.SeriesWindow && s.written {
			delete(w.series, key)
		}
	}
	for _, s := range w.series {
		if !s.written && w.take(s.reason, now) {
			w.patch(ctx, s.reason, s)
		}
	}
	for reason, n := range w.limited {
		if b := w.buckets[reason]; b != nil && b.tokens+float64(now.Sub(b.at))/float64(w.o.Refill) >= 1 {
			w.o.Logger.Info("events: their reason's bound refilled", "reason", reason, "dropped", n)
			delete(w.limited, reason)
		}
	}
}

// answered handles a request's outcome: false when it failed. An API
// server that does not answer starts an outage (said once), one that
// answers again ends it (with the count of events lost); one that refuses
// an event is said once per reason.
func (w *writer) answered(reason string, err error) bool {
	w.tried = time.Now()
	var status apierrors.APIStatus
	switch {
	case err == nil || apierrors.IsNotFound(err):
		// A series whose event expired on the API server is done.
		if w.down {
			w.o.Logger.Info("events: the API server answers again", "dropped", w.dropped)
			w.down, w.dropped = false, 0
		}
		return err == nil
	case errors.Is(err, context.Canceled):
		return false
	case errors.As(err, &status) && !apierrors.IsServerTimeout(err) && !apierrors.IsTimeout(err) && !apierrors.IsServiceUnavailable(err) && !apierrors.IsTooManyRequests(err) && !apierrors.IsInternalError(err):
		if !w.refused[reason] {
			w.refused[reason] = true
			w.o.Logger.Warn("events: the API server refuses them", "reason", reason, "error", err,
				"hint", "the service account needs create and patch on events.k8s.io events in this namespace")
		}
		return false
	}
	w.lost()
	if !w.down {
		w.down = true
		w.o.Logger.Warn("events: the API server does not answer; events are dropped until it does", "error", err)
	}
	return false
}

// lost counts an event dropped while the API server does not answer.
func (w *writer) lost() { w.dropped++ }

// regarding is this pod, with its uid once the API server gave it.
func (w *writer) regarding(ctx context.Context, now time.Time) objectReference {
	ref := objectReference{APIVersion: "v1", Kind: "Pod", Namespace: w.o.Namespace, Name: w.o.Pod, UID: w.uid}
	if w.uid != "" || w.o.Pods == nil || now.Sub(w.uidAt) < retryDown || w.down {
		return ref
	}
	w.uidAt = now
	rctx, cancel := context.WithTimeout(ctx, w.o.Timeout)
	defer cancel()
	pod, err := w.o.Pods.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace(w.o.Namespace).Get(rctx, w.o.Pod, metav1.GetOptions{})
	if err == nil {
		w.uid = pod.UID
		ref.UID = pod.UID
	}
	return ref
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}
