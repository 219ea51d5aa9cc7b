package fetch

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	neturl "net/url"
)

// statusError explains a non-2xx answer with its status and the beginning
// of what the server said, which is often the reason (a login wall, a
// removed page, a rate limit).
func (f *fetch) statusError(resp *http.Response, mediaType string, params map[string]string) error {
	status := resp.Status
	if status == "" {
		status = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	hint := "check the URL"
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		hint = "the page does not exist; check the URL"
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		hint = "the page is not public or refuses automated clients"
	case resp.StatusCode == http.StatusTooManyRequests:
		hint = "the server is rate limiting; wait before trying again"
	case resp.StatusCode >= 500:
		hint = "the server failed; try again later"
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		hint = "the server redirected without a usable Location"
	}

	limit := min(f.limits.MaxBytes, errorBodyBytes)
	body, _, err := readLimited(resp.Body, limit)
	snippet := "the body is empty"
	if len(body) > 0 {
		k, decided := kindOf(mediaType)
		if !decided || k != kindBinary {
			k, mediaType = sniff(k, decided, mediaType, body)
		}
		switch k {
		case kindBinary:
			snippet = "the body is binary (" + mediaType + ")"
		default:
			charset := params["charset"]
			if charset == "" && k == kindHTML {
				charset = metaCharset(body)
			}
			text := decodeText(body, charset, true)
			if k == kindHTML {
				if c, err := toMarkdown(f.tctx, text, f.final, htmlBounds{markdown: errorBodyBytes}); err == nil {
					text = c.md
				}
			}
			snippet = "the body starts: " + cut(oneLine(text), errorSnippetRunes)
		}
	} else if err != nil {
		snippet = "the body could not be read"
	}
	return fmt.Errorf("fetch_content: GET %s returned HTTP %s (%s); %s", f.shown, status, hint, snippet)
}

func (f *fetch) binaryError(mediaType, size string) error {
	return fmt.Errorf("fetch_content: %s is a binary file (%s, %s); fetch_content reads text, HTML and JSON only", f.shown, mediaType, size)
}

// failure turns a transport or read error into the error Get returns. when
// says at which point of the fetch it happened, if that is worth saying.
func (f *fetch) failure(err error, when string) error {
	if f.ctx.Err() != nil {
		return fmt.Errorf("fetch_content: GET %s cancelled: %w", f.shown, f.ctx.Err())
	}
	var re *redirectError
	if errors.As(err, &re) {
		if re.scheme != "" {
			return fmt.Errorf("fetch_content: GET %s was redirected to %s, whose scheme %q is not supported; only http and https URLs can be fetched", f.shown, re.to, re.scheme)
		}
		what := "too many redirects"
		if re.loop {
			what = "a redirect loop"
		}
		return fmt.Errorf("fetch_content: GET %s stopped at %s: more than %d redirects (the limit), the last one to %s; the URL cannot be fetched as is, try another one", f.shown, what, re.limit, re.to)
	}
	if when != "" {
		when = " " + when
	}
	var ne net.Error
	if f.tctx.Err() != nil || errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("fetch_content: GET %s timed out%s: the limit is %s for the whole fetch; the server is slow or not answering, try again later or another URL", f.shown, when, f.limits.Timeout)
	}
	return fmt.Errorf("fetch_content: GET %s failed%s: %s", f.shown, when, oneLine(unwrapURLError(err)))
}

// convertError explains why an HTML body that was read has no Markdown:
// the caller cancelled, the fetch's time ran out while converting, or the
// converter failed.
func (f *fetch) convertError(err error) error {
	switch {
	case f.ctx.Err() != nil:
		return fmt.Errorf("fetch_content: GET %s cancelled while converting it to Markdown: %w", f.shown, f.ctx.Err())
	case f.tctx.Err() != nil:
		return fmt.Errorf("fetch_content: GET %s timed out while converting its HTML to Markdown: the limit is %s for the whole fetch; fetch it with curl in bash to read the raw HTML", f.shown, f.limits.Timeout)
	}
	return fmt.Errorf("fetch_content: %s is HTML that could not be converted to Markdown (%s); fetch it with curl in bash to read the raw HTML", f.shown, oneLine(err.Error()))
}

// unwrapURLError drops the `Get "url":` prefix of a *url.Error, because the
// error texts name the URL themselves.
func unwrapURLError(err error) string {
	var ue *neturl.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err.Error()
	}
	return err.Error()
}
