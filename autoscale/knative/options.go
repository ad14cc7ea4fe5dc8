package knative

import (
	"errors"
	"fmt"
	"time"
)

// DefaultService is the function Service's name in deploy/knative.
const DefaultService = "sluice-fn"

// DefaultPoll is how often Run reads the Service and its Revisions.
const DefaultPoll = time.Second

// Options configure the actuator.
type Options struct {
	// Namespace and Service name the function's Knative Service.
	Namespace, Service string
	// URL is where the job's agents send tasks; empty means the Service's
	// status.address.url (the cluster-local address, for agents in
	// the cluster), else its status.url.
	URL string
	// Concurrency is the requests one replica takes at once: the
	// controller's replica concurrency, and what the Service's
	// containerConcurrency and KPA target must be (CheckService).
	Concurrency int
	// MaxScale, when > 0, is the Service's max-scale, set with the
	// min-scale floor when a job starts or ends (the controller's
	// --max-replicas); 0 leaves the Service's own.
	MaxScale int
	// Poll is how often Run reads ready replicas (default DefaultPoll).
	Poll time.Duration
	// WakeTimeout bounds the request that wakes the Service from zero
	// when a job first asks for replicas (default DefaultWakeTimeout; < 0:
	// no wake).
	WakeTimeout time.Duration
	// KPAAlone leaves the Service to Knative's KPA, which sizes it by the
	// concurrency the agents' fixed in-flight budget makes: the baseline
	// Sluice's scaling is measured against (`sluice loadtest controller
	// --knative-scaling kpa`). Scale then records and wakes nothing,
	// StartJob and EndJob patch no bounds, and the Service's KPA settings
	// are not checked against Sluice's (CheckService).
	KPAAlone bool
}

// DefaultWakeTimeout bounds a wake: Knative's activator holds it until a
// pod is ready, which from zero takes seconds, or a minute for an image
// not yet pulled.
const DefaultWakeTimeout = 2 * time.Minute

func (o Options) withDefaults() Options {
	if o.Service == "" {
		o.Service = DefaultService
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.WakeTimeout == 0 {
		o.WakeTimeout = DefaultWakeTimeout
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("namespace: want the function Service's namespace"))
	}
	if o.Concurrency < 1 || o.Concurrency > 1000 {
		errs = append(errs, fmt.Errorf("concurrency %d: want 1..1000", o.Concurrency))
	}
	if o.MaxScale < 0 {
		errs = append(errs, fmt.Errorf("max scale %d: want >= 0 (0 keeps the Service's)", o.MaxScale))
	}
	if o.Poll > time.Minute {
		errs = append(errs, fmt.Errorf("poll %v: want at most 1m", o.Poll))
	}
	if o.WakeTimeout > 10*time.Minute {
		errs = append(errs, fmt.Errorf("wake timeout %v: want at most 10m (< 0: no wake)", o.WakeTimeout))
	}
	if len(errs) > 0 {
		return fmt.Errorf("knative actuator: %w", errors.Join(errs...))
	}
	return nil
}
