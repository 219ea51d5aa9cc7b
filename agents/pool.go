package agents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
)

// Pool holds one session's asked agents: one per agent, started on first
// use in the session's cwd, kept for later questions, closed with the
// session. It is safe for concurrent use.
type Pool struct {
	configs   map[string]Config
	cwd       string
	sessionID string
	log       *slog.Logger

	mu     sync.Mutex
	agents map[string]*Agent
	closed bool
}

// NewPool returns the pool of a session in cwd.
func NewPool(configs []Config, cwd, sessionID string, log *slog.Logger) *Pool {
	p := &Pool{configs: map[string]Config{}, cwd: cwd, sessionID: sessionID, log: log, agents: map[string]*Agent{}}
	for _, c := range configs {
		p.configs[c.Name] = c
	}
	return p
}

// Names lists the agents that can be asked, sorted.
func (p *Pool) Names() []string {
	var out []string
	for n := range p.configs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Ask asks the named agent, starting it (or starting it again, if its
// process ended) as needed.
func (p *Pool) Ask(ctx context.Context, name, question string, relay Relay) (string, error) {
	cfg, ok := p.configs[name]
	if !ok {
		if len(p.configs) == 0 {
			return "", fmt.Errorf("there is no agent %q: no agents are configured (config agents)", name)
		}
		return "", fmt.Errorf("there is no agent %q; the agents are: %s", name, strings.Join(p.Names(), ", "))
	}
	for attempt := 0; ; attempt++ {
		a, err := p.agent(ctx, cfg)
		if err != nil {
			return "", err
		}
		answer, err := a.Ask(ctx, question, relay)
		if errors.Is(err, ErrGone) && attempt == 0 {
			p.drop(name, a)
			continue
		}
		if ctx.Err() != nil {
			// A cancelled question may have cost the agent its process.
			select {
			case <-a.done:
				p.drop(name, a)
			default:
			}
		}
		return answer, err
	}
}

func (p *Pool) agent(ctx context.Context, cfg Config) (*Agent, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("the session is closed")
	}
	if a := p.agents[cfg.Name]; a != nil {
		p.mu.Unlock()
		return a, nil
	}
	p.mu.Unlock()
	// Starting takes a moment (a process, initialize, session/new); calls
	// of one session run one at a time, so two starts of one agent do not
	// race in practice, and the loser of a race is closed below.
	a, err := Start(ctx, cfg, p.cwd, p.sessionID, p.log)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.agents[cfg.Name]; old != nil || p.closed {
		go a.Close()
		if p.closed {
			return nil, errors.New("the session is closed")
		}
		return old, nil
	}
	p.agents[cfg.Name] = a
	return a, nil
}

func (p *Pool) drop(name string, a *Agent) {
	p.mu.Lock()
	if p.agents[name] == a {
		delete(p.agents, name)
	}
	p.mu.Unlock()
	a.Close()
}

// Close stops every agent of the pool and returns once they are gone.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	agents := p.agents
	p.agents = map[string]*Agent{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func() { defer wg.Done(); a.Close() }()
	}
	wg.Wait()
}
