package deadletter

import "sync"

// maxSuspects bounds the suspects remembered across sessions.
const maxSuspects = 10000

// Suspects are event IDs whose delivery failed with a permanent error in a
// batch; the next session produces each alone. The zero value is ready; it
// is safe for concurrent use and outlives sessions.
type Suspects struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

// Add makes id a suspect (up to a bound).
func (s *Suspects) Add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]struct{}{}
	}
	if len(s.ids) < maxSuspects {
		s.ids[id] = struct{}{}
	}
}

// Has reports whether id is a suspect.
func (s *Suspects) Has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	return ok
}

// Remove clears id, delivered or dead-lettered.
func (s *Suspects) Remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids, id)
}
