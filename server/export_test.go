package server

import "time"

// SetStoreScrapeTimeout makes the scrapes of m bound their Store reads by
// d instead of StoreScrapeTimeout. Call it before the first scrape.
func SetStoreScrapeTimeout(m *Metrics, d time.Duration) { m.storeTimeout = d }
