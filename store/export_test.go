package store

// SetAnswerInOneTrip switches Tx.AppendAndCommit's single round trip (off:
// the two round trips whose rows it must reproduce).
func SetAnswerInOneTrip(on bool) { answerInOneTrip = on }

// OnSettleWait sets a function called when a reader starts waiting for a
// local commit to settle (FollowEventsThrough).
func (s *Store) OnSettleWait(fn func()) { s.local.waiting = fn }
