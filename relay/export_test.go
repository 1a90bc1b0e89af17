package relay

// The tests check, as every relay closes, that it left no empty entry.
func init() { checkEntries = true }
