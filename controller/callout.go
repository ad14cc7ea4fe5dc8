package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/wire"
)

// The NATS server's auth callout (natsperm.Render configures it): every
// connection whose user is not a static one (controller, cli, admin) is
// asked of the controllers, a queue group so that one of a standby pair
// answers. An agent connects as its job (wire.AgentNATSUser) with the
// password its team key gives; the controller looks the job's record up,
// compares the password's hash with the record's in constant time, and
// answers with a user whose permissions are the agent role narrowed to
// that job (natsperm.AgentFor), signed with the issuer's seed the server
// trusts, that expires after Options.AgentLoginTTL: the server then closes
// the connection and the reconnect is asked again. Anything else is
// refused, logged and counted.

// calloutQueue is the queue group of the controllers' callout
// subscriptions.
const calloutQueue = "sluice-controllers"

// calloutLookupTimeout bounds the record lookup of one callout: the
// server gives up on the answer after natsperm.CalloutWait, so the lookup
// ends before, leaving time to sign and send its refusal.
const calloutLookupTimeout = natsperm.CalloutWait * 3 / 4

// globalAccount is the account of a nats-server configured without
// accounts, where every Sluice user lives: the user claims' audience.
const globalAccount = "$G"

// Why an agent's login is refused: the values of the metric's label.
const (
	refusedNotAgent      = "not_agent_user"
	refusedNoJob         = "no_job"
	refusedNoCredential  = "no_credential"
	refusedWrongPassword = "wrong_password"
	refusedLookup        = "lookup_error"
	refusedBadRequest    = "bad_request"
)

// legacyAgentUser is the user every agent of every job shared before
// agents connected as their jobs; an agent still configured with it is
// told what changed.
const legacyAgentUser = "sluice-agent"

// agentLogin is what a callout request asks: who connects, with what.
type agentLogin struct {
	User, Password string
}

// checkAgentLogin decides login, an agent of job, against the job's record
// (nil: no such job): nil if it may in, else the refusal's label and its
// reason for the log (never the password). A finished job's agents are
// let in: they learn from the record that it ended, not from a refusal.
func checkAgentLogin(login agentLogin, job string, rec *wire.Job) (label string, err error) {
	switch {
	case rec == nil:
		return refusedNoJob, fmt.Errorf("job %s: no such job (submitted, and not deleted?)", job)
	case rec.AgentAuth == "":
		return refusedNoCredential, fmt.Errorf("job %s was submitted without a team key: its agents cannot connect as the job (submit it again with `sluice job submit`)", job)
	case !wire.AgentPasswordMatches(login.Password, rec.AgentAuth):
		return refusedWrongPassword, fmt.Errorf("job %s: the password is not the one of the job's team key (a key of another submission of the job, or of another job?)", job)
	}
	return "", nil
}

// jobOfLogin is the job whose agent user login is, or why not.
func jobOfLogin(login agentLogin) (string, error) {
	if login.User == legacyAgentUser {
		return "", fmt.Errorf("user %s, which agents shared, is gone: an agent connects as its job (%s) with the job's team key (--team-key-file, $%s); unset its NATS user",
			legacyAgentUser, wire.AgentNATSUser("<job id>"), wire.TeamKeyFileEnv)
	}
	job, err := wire.AgentJobOfUser(login.User)
	if err != nil {
		return "", fmt.Errorf("user %q: %w", cutUser(login.User), err)
	}
	return job, nil
}

// cutUser bounds a user name from outside for a log line.
func cutUser(u string) string {
	const most = 80
	if len(u) > most {
		return u[:most] + "..."
	}
	return u
}

// ServeCallout starts answering the NATS server's auth callouts
// (Options.CalloutIssuer; nothing without one) now, before Run, so that
// agents can connect before the controller runs jobs (the demo opens its
// agent first). Run starts it where it was not, and ends it when it
// returns.
func (c *Controller) ServeCallout() error {
	issuer := c.opts.CalloutIssuer
	if issuer == nil {
		return nil
	}
	c.calloutMu.Lock()
	defer c.calloutMu.Unlock()
	if c.calloutSub != nil {
		return nil
	}
	sub, err := c.opts.NC.QueueSubscribe(natsperm.CalloutSubject, calloutQueue, func(m *nats.Msg) {
		ctx, cancel := context.WithTimeout(context.Background(), calloutLookupTimeout)
		defer cancel()
		resp, err := c.answerCallout(ctx, m.Data)
		if err != nil {
			// Unsigned, nothing to answer with: the server times out.
			c.log.Warn("answering an auth callout", "err", err)
			return
		}
		if err := m.Respond(resp); err != nil {
			c.log.Warn("answering an auth callout", "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("serving the auth callout on %s: %w", natsperm.CalloutSubject, err)
	}
	c.calloutSub = sub
	pub, _ := issuer.PublicKey()
	c.log.Info("serving the NATS auth callout for agents", "issuer", pub)
	return nil
}

// stopCallout ends what ServeCallout started.
func (c *Controller) stopCallout() {
	c.calloutMu.Lock()
	defer c.calloutMu.Unlock()
	if c.calloutSub != nil {
		_ = c.calloutSub.Unsubscribe()
		c.calloutSub = nil
	}
}

// answerCallout is the signed answer to one callout request: the agent's
// user, or a refusal.
func (c *Controller) answerCallout(ctx context.Context, data []byte) ([]byte, error) {
	req, err := jwt.DecodeAuthorizationRequestClaims(string(data))
	if err != nil {
		c.m.agentLogins.WithLabelValues(refusedBadRequest).Inc()
		return nil, fmt.Errorf("decoding the request: %w", err)
	}
	issuer := c.opts.CalloutIssuer
	answer := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	answer.Audience = req.Server.ID
	login := agentLogin{User: req.ConnectOptions.Username, Password: req.ConnectOptions.Password}
	job, label, why := c.authorizeAgent(ctx, login)
	if why != nil {
		c.m.agentLogins.WithLabelValues(label).Inc()
		c.log.Warn("refused an agent's NATS login", "job", job, "reason", label, "host", req.ClientInformation.Host, "err", why)
		answer.Error = why.Error()
	} else {
		user := jwt.NewUserClaims(req.UserNkey)
		user.Audience = globalAccount
		user.Name = login.User
		// Rounded up to the second: a JWT's times are whole seconds.
		user.Expires = (time.Now().Add(c.opts.AgentLoginTTL).UnixMilli() + 999) / 1000
		role := natsperm.AgentFor(job)
		user.Pub.Allow.Add(role.Publish...)
		user.Sub.Allow.Add(role.Subscribe...)
		if answer.Jwt, err = user.Encode(issuer); err != nil {
			return nil, fmt.Errorf("signing job %s's agent user: %w", job, err)
		}
		c.m.agentLogins.WithLabelValues("accepted").Inc()
		c.log.Debug("an agent logged in to NATS as its job", "job", job, "host", req.ClientInformation.Host)
	}
	tok, err := answer.Encode(issuer)
	if err != nil {
		return nil, fmt.Errorf("signing the answer: %w", err)
	}
	return []byte(tok), nil
}

// authorizeAgent checks login: the job it is an agent of, or the refusal's
// label and reason.
func (c *Controller) authorizeAgent(ctx context.Context, login agentLogin) (job, label string, err error) {
	job, err = jobOfLogin(login)
	if err != nil {
		return "", refusedNotAgent, err
	}
	var rec *wire.Job
	j, err := c.opts.Broker.Job(ctx, job)
	switch {
	case errors.Is(err, broker.ErrJobNotFound):
	case err != nil:
		return job, refusedLookup, err
	default:
		rec = &j
	}
	label, err = checkAgentLogin(login, job, rec)
	return job, label, err
}
