package main

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
)

// words is the vocabulary of the text-like payloads: common English words
// of an assistant's travel-and-support chatter, so payloads compress about
// as well as real conversation text does (not as zeros or random bytes do).
var words = strings.Fields(`
the a an and or but if then so because while when where which who what how
is are was were be been being have has had do does did will would can could
should may might must shall not no yes please thank thanks sorry okay sure
I you he she it we they me him her us them my your his its our their this
that these those here there now later today tomorrow yesterday morning
evening night week month year time date day hour minute second
flight hotel room booking reservation ticket seat window aisle gate
terminal airport train station bus car taxi rental return departure arrival
Lisbon Porto Madrid Paris Berlin Rome London Vienna Prague Amsterdam
price cost budget total amount refund charge card payment invoice receipt
order account customer agent user assistant tool call result answer
question request approve approval confirm confirmed cancel cancelled
change update check look find search list show send open close start stop
available unavailable pending expired resolved error retry again
policy rule limit allowed required optional extra included excluded
breakfast dinner lunch coffee river view quiet late early checkout checkin
luggage bag baggage weight kilo extra fee tax discount offer deal
weather forecast sunny rainy cloudy wind warm cold light heavy
summary note detail details information number code reference email phone
address name first last family child children adult adults passenger
from to in on at by for with without about into over under after before
between during through up down out off near far next previous same other
new old good better best fine great small large long short high low
more less most least many much few some any all each every both either
one two three four five six seven eight nine ten first second third
`)

// The payloads of a run are cut from pools made once, so that the load
// generator spends its CPU driving the runtime, not composing text. The
// pools are large enough (a few MiB) that Pebble's 32 KiB blocks see no
// more repetition than they would in real conversations.
const (
	corpusBytes = 4 << 20 // the text that text payloads are cut from
	jsonPool    = 2048    // distinct JSON results of each size
)

var (
	corpusOnce sync.Once
	corpus     string
	jsonMu     sync.Mutex
	jsonPools  = map[int][]string{}
)

// text returns n bytes of word-like text cut from a random place of the
// shared corpus (without copying it).
func text(n int) string {
	corpusOnce.Do(func() { corpus = textLike(corpusBytes) })
	if n >= len(corpus) {
		return textLike(n)
	}
	at := rand.IntN(len(corpus) - n)
	return corpus[at : at+n]
}

// jsonResult returns one of jsonPool JSON results of about n bytes, made
// with jsonLike the first time a size is asked for.
func jsonResult(n int) string {
	jsonMu.Lock()
	pool := jsonPools[n]
	if pool == nil {
		pool = make([]string, jsonPool)
		for i := range pool {
			pool[i] = jsonLike(n)
		}
		jsonPools[n] = pool
	}
	jsonMu.Unlock()
	return pool[rand.IntN(len(pool))]
}

// textLike returns n bytes of word-like text.
func textLike(n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		if b.Len() > 0 {
			if rand.IntN(12) == 0 {
				b.WriteString(". ")
			} else {
				b.WriteByte(' ')
			}
		}
		b.WriteString(words[rand.IntN(len(words))])
	}
	return b.String()[:n]
}

// jsonLike returns about n bytes of a JSON object of text-like fields, as a
// search tool's result would be.
func jsonLike(n int) string {
	var b strings.Builder
	b.Grow(n + 128)
	b.WriteString(`{"results":[`)
	for i := 0; b.Len() < n-2; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"id":`)
		b.WriteString(strconv.Itoa(rand.IntN(1_000_000)))
		b.WriteString(`,"price":`)
		b.WriteString(strconv.Itoa(50 + rand.IntN(2000)))
		b.WriteString(`,"title":"`)
		b.WriteString(textLike(24 + rand.IntN(24)))
		b.WriteString(`","note":"`)
		b.WriteString(textLike(60 + rand.IntN(80)))
		b.WriteString(`"}`)
	}
	b.WriteString(`]}`)
	return b.String()
}
