package store

// SetAnswerInOneTrip switches Tx.AppendAndCommit's single round trip (off:
// the two round trips whose rows it must reproduce).
func SetAnswerInOneTrip(on bool) { answerInOneTrip = on }
