"""The console in a real browser: Debian's headless Chromium driven by Selenium (chromedriver from the
same Debian build; `make` installs both through scripts/sysdeps.sh). Over the broker and over the data dir
copy: the timeline's bars against the loghub CSV, a window dragged on the chart read page by page, and a
group rewound with the preview and confirmation buttons. Screenshots of the pages go to
$CONSOLE_SCREENSHOTS when it is set (docs/console.md shows them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from tests.console.conftest import LATE_BASE
from tests.console.test_console_groups import commit_at_end, committed
from tests.console.test_console_http import exact_counts, index_counts, late_counts, merged
from tests.waiting import poll_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="chromium and chromedriver are not installed "
                                "(scripts/sysdeps.sh installs Debian's)")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium')}", "--window-size=1100,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def shot(driver, name: str) -> None:
    where = os.environ.get("CONSOLE_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1100, min(max(height + 40, 500), 1200))
        driver.save_screenshot(str(Path(where) / f"{name}.png"))
        driver.set_window_size(1100, 900)


def wait_for(driver, css: str, timeout: float = 60):
    """The element once the page that holds it has loaded (a click's navigation is not waited for)."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout).until(expected_conditions.presence_of_element_located(("css selector", css)))


def table_cells(driver, css: str) -> list[list[str]]:
    """The text of each cell of each body row of the table `css`, as the page renders it (innerText, as
    WebElement.text reads it), read in one script call: a WebDriver call per cell took most of the test."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'), tr =>"
        " Array.from(tr.querySelectorAll('td'), td => td.innerText.trim()))", css)


def drawn(driver) -> dict:
    """What the page's uPlot chart holds and drew: its x values (bucket starts), the end of its x scale (the
    last edge), its series, whether the late series is shown, and the size of the canvas it painted."""
    wait_for(driver, "#timeline canvas")
    return driver.execute_script(
        "var u = window.chronologTimeline; var c = u.root.querySelector('canvas');"
        "return {starts: u.data[0], totals: u.data[1], late: u.data[2], end: u.scales.x.max,"
        " late_shown: u.series.length > 2 && u.series[2].show, canvas: [c.width, c.height]};")


@pytest.mark.parametrize("mode", ["data-dir", "broker"])
def test_timeline_and_a_dragged_window_in_a_browser(browser, loaded, broker_console, dir_console, mode):
    from selenium.webdriver.common.action_chains import ActionChains
    console = dir_console if mode == "data-dir" else broker_console
    stamps = loaded.truth["linux"]
    every = [ts for p in stamps for ts in stamps[p]]
    browser.get(console.url("/"))
    assert browser.find_element("css selector", "#topics a[href='/topics/linux']")
    shot(browser, f"topics-{mode}")
    browser.find_element("css selector", "#topics a[href='/topics/linux']").click()
    wait_for(browser, "#partitions")
    chart = drawn(browser)
    edges = chart["starts"] + [chart["end"]]
    assert len(chart["starts"]) > 20 and min(chart["canvas"]) > 100
    want = exact_counts(every, edges) if mode == "data-dir" else \
        [sum(c) for c in zip(*(index_counts(s, edges) for s in stamps.values()), strict=True)]
    assert chart["totals"] == want and sum(want) == len(every)
    assert chart["late_shown"] == (mode == "data-dir")  # a broker's counts cannot tell late records
    shot(browser, f"timeline-{mode}")

    # a click on the chart zooms into the bucket under the cursor
    over = browser.find_element("css selector", "#timeline .u-over")
    ActionChains(browser).move_to_element(over).click().perform()
    assert poll_until(lambda: "from=" in browser.current_url, 60)
    q = parse_qs(urlparse(browser.current_url).query)
    a, b = int(q["from"][0]), int(q["to"][0])
    assert a in chart["starts"] and b == edges[edges.index(a) + 1]
    browser.back()
    wait_for(browser, "#partitions")

    # drag across the middle of the chart: the records page of that window opens
    chart = browser.find_element("css selector", "#timeline .u-over")
    width = chart.size["width"]
    ActionChains(browser).move_to_element_with_offset(chart, int(-width * 0.25), 0).click_and_hold() \
        .move_by_offset(int(width * 0.2), 0).release().perform()
    wait_for(browser, "#records")
    assert "/topics/linux/records" in browser.current_url
    q = parse_qs(urlparse(browser.current_url).query)
    t1, t2 = int(q["from"][0]), int(q["to"][0])
    span = edges[-1] - edges[0]  # the window is the dragged part of the axis: from 25% to 45% of it
    assert 0.2 < (t1 - edges[0]) / span < 0.3 and 0.15 < (t2 - t1) / span < 0.25
    if mode == "broker":  # ask for late records too: the window must then be exact over the protocol
        browser.get(browser.current_url + "&late=1")
    got = []
    while True:
        got += [(int(cells[0]), int(cells[1]), int(cells[3])) for cells in table_cells(browser, "#records")]
        nxt = browser.find_elements("css selector", "a#next")
        if not nxt:
            break
        if len(got) <= 100:
            shot(browser, f"records-{mode}")
        old = browser.find_element("css selector", "#records")
        nxt[0].click()
        from selenium.webdriver.support import expected_conditions
        from selenium.webdriver.support.ui import WebDriverWait
        WebDriverWait(browser, 60).until(expected_conditions.staleness_of(old))
        wait_for(browser, "#records")
    expect = merged(stamps, t1, t2)  # partitions merged by time, the partition a column
    assert got == expect and len(expect) > 0
    assert [ts for _p, _o, ts in got] == sorted(ts for _p, _o, ts in got)  # no late lines here: time never goes back


def test_rewind_a_group_in_a_browser(browser, loaded, broker_console, dir_console):
    from selenium.webdriver.support.ui import Select
    bootstrap = loaded.broker.bootstrap
    stamps = loaded.truth["late"]
    ends = {p: len(s) for p, s in stamps.items()}
    commit_at_end(bootstrap, "browser-replay", "late", ends)
    browser.get(broker_console.url("/groups"))
    browser.find_element("css selector", "#groups a[href='/groups/browser-replay']").click()
    wait_for(browser, "#offsets")
    Select(browser.find_element("name", "topic")).select_by_visible_text("late")
    browser.find_element("name", "time").send_keys("2023-11-14T22:40:00Z")
    shot(browser, "group")
    browser.find_element("css selector", "form button").click()
    wait_for(browser, "#rewind")
    when = 1_700_001_600_000  # 2023-11-14T22:40:00Z
    want = {p: next(o for o, ts in enumerate(s) if ts >= when) for p, s in stamps.items()}
    rows = [[td.text for td in tr.find_elements("css selector", "td")]
            for tr in browser.find_elements("css selector", "#rewind tbody tr")]
    assert [(int(r[1]), int(r[2]), int(r[3])) for r in rows] == [(p, ends[p], want[p]) for p in sorted(want)]
    assert committed(bootstrap, "browser-replay", "late", 2) == ends
    shot(browser, "rewind-preview")
    browser.find_element("id", "confirm").click()
    wait_for(browser, "div.ok")
    assert "rewound to 2023-11-14T22:40:00.000Z" in browser.page_source
    assert committed(bootstrap, "browser-replay", "late", 2) == want
    shot(browser, "rewind-done")
    # the data-dir console's late topic and segments pages, for the docs
    browser.get(dir_console.url("/topics/late", step=60_000))
    chart = drawn(browser)
    edges = chart["starts"] + [chart["end"]]
    every = [ts for p in stamps for ts in stamps[p]]
    assert chart["totals"] == exact_counts(every, edges)
    assert chart["late_shown"] and sum(chart["late"]) > 50
    assert chart["late"] == [sum(c) for c in zip(*(late_counts(s, edges) for s in stamps.values()), strict=True)]
    shot(browser, "timeline-late")
    browser.get(dir_console.url("/topics/late/segments"))
    assert browser.find_elements("css selector", "g.segment")
    shot(browser, "segments")
    assert LATE_BASE < when


def axis(driver) -> dict:
    """The x axis as uPlot drew it: its label, the tick positions and the texts painted at them."""
    wait_for(driver, "#timeline canvas")
    return driver.execute_script(
        "var a = window.chronologTimeline.axes[0];"
        "return {label: a.label, splits: a._splits, values: a._values, ydistr: window.chronologTimeline.scales.y.distr};")


def status_of(driver, url: str) -> int:
    """The HTTP status the browser gets for `url` (fetched from the page, as a link's navigation would)."""
    return driver.execute_async_script(
        "var done = arguments[arguments.length - 1]; fetch(arguments[0]).then(r => done(r.status));", url)


def test_a_huge_window_is_clamped_round_and_labelled_with_a_log_toggle(browser, loaded, dir_console):
    stamps = loaded.truth["linux"]
    every = [ts for p in stamps for ts in stamps[p]]
    browser.get(dir_console.url("/topics/linux", **{"from": "1970-01-01T00:00:00Z", "to": "2036-01-01T00:00:00Z"}))
    wait_for(browser, "#partitions")
    note = browser.find_element("css selector", ".notice").text
    assert "reaches beyond the topic's records" in note and "1970-01-01T00:00:00.000Z" in note
    chart = drawn(browser)
    edges = chart["starts"] + [chart["end"]]
    step = edges[1] - edges[0]
    assert all(e % step == 0 for e in edges) and step in (3_600_000, 10_800_000, 21_600_000, 43_200_000)
    assert edges[0] <= min(every) and max(every) < edges[-1] and chart["totals"] == exact_counts(every, edges)
    x = axis(browser)
    assert x["label"].startswith("record time (UTC)") and len(x["values"]) >= 3 and all(x["values"])
    assert all(s % step == 0 for s in x["splits"])  # ticks on bucket edges: round UTC times
    shot(browser, "timeline-clamped")
    # the log-scale toggle redraws the bars on a log axis, and the address keeps the choice
    browser.find_element("id", "log-scale").click()
    assert poll_until(lambda: axis(browser)["ydistr"] == 3, 30)
    assert "log=1" in browser.current_url and all(axis(browser)["values"])
    browser.refresh()
    wait_for(browser, "#partitions")
    assert axis(browser)["ydistr"] == 3 and browser.find_element("id", "log-scale").is_selected()
    browser.find_element("id", "log-scale").click()
    assert poll_until(lambda: axis(browser)["ydistr"] == 1, 30)


def test_epoch_seconds_in_the_address_and_status_codes(browser, loaded, broker_console, dir_console):
    seconds = LATE_BASE // 1000
    browser.get(dir_console.url("/topics/late", **{"from": seconds, "to": seconds + 3600}))
    wait_for(browser, "#partitions")
    notes = [n.text for n in browser.find_elements("css selector", ".notice")]
    assert any(f"{seconds} has 10 digits, so it was read as epoch seconds (2023-11-14T22:13:20.000Z)" in n
               for n in notes), notes
    chart = drawn(browser)
    step = chart["starts"][1] - chart["starts"][0]
    assert chart["starts"][0] <= LATE_BASE < chart["starts"][0] + step
    assert chart["end"] - step < LATE_BASE + 3_600_000 <= chart["end"]
    # 404 for what does not exist, 400 for input a page cannot use: with the reason on the page
    for path, query, status, words in (
            ("/groups/no-such-group", {}, 404, "group no-such-group does not exist"),
            ("/topics/no-such-topic", {}, 404, "not found"),
            ("/topics/late", {"step": "-5"}, 400, "step must be at least 1, got -5"),
            ("/topics/late/records", {"from": seconds, "to": seconds + 60, "cursor": "zz"}, 400, "cursor is")):
        url = broker_console.url(path, **query)
        browser.get(url)
        text = wait_for(browser, "div.error").text
        assert words in text and "None" not in text, text
        assert status_of(browser, url) == status, path


def test_exact_counts_on_request_over_a_broker(browser, loaded, broker_console):
    stamps = loaded.truth["spike"][0]
    browser.get(broker_console.url("/topics/spike", step=300_000))
    wait_for(browser, "#partitions")
    counted = browser.find_element("id", "counted")
    assert counted.get_attribute("data-counted") == "estimate" and "estimated counts" in counted.text
    chart = drawn(browser)
    edges = chart["starts"] + [chart["end"]]
    # the replayed burst is not one tall bar at the end: its bar was checked and the records moved home
    assert chart["totals"] == exact_counts(stamps, edges) and not chart["late_shown"]
    browser.find_element("id", "count-exact").click()
    assert poll_until(lambda: "count=exact" in browser.current_url, 60)
    wait_for(browser, "#partitions")
    counted = browser.find_element("id", "counted")
    assert counted.get_attribute("data-counted") == "exact" and "exact counts" in counted.text
    chart = drawn(browser)
    assert chart["totals"] == exact_counts(stamps, edges) and chart["late_shown"]
    assert chart["late"] == late_counts(stamps, edges) and sum(chart["late"]) == 500
    shot(browser, "timeline-exact-broker")


def test_a_rewind_before_the_first_record_needs_a_second_confirmation(browser, loaded, broker_console):
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import Select, WebDriverWait
    bootstrap = loaded.broker.bootstrap
    stamps = loaded.truth["late"]
    ends = {p: len(s) for p, s in stamps.items()}
    commit_at_end(bootstrap, "browser-early", "late", ends)
    browser.get(broker_console.url("/groups/browser-early"))
    wait_for(browser, "#offsets")
    Select(browser.find_element("name", "topic")).select_by_visible_text("late")
    day_before = (min(min(s) for s in stamps.values()) - 86_400_000) // 1000  # epoch seconds, as people type
    browser.find_element("name", "time").send_keys(str(day_before))
    browser.find_element("css selector", "#rewind-form button").click()
    wait_for(browser, "#rewind")
    assert "read as epoch seconds" in browser.find_element("css selector", ".notice").text
    assert "is before the first record of late" in browser.find_element("id", "early").text
    old = browser.find_element("id", "confirm")
    old.click()  # one click: asked again, nothing committed
    WebDriverWait(browser, 60).until(expected_conditions.staleness_of(old))
    assert "Confirm once more" in wait_for(browser, "#early").text
    assert committed(bootstrap, "browser-early", "late", 2) == ends
    shot(browser, "rewind-early")
    browser.find_element("id", "confirm").click()
    wait_for(browser, "div.ok")
    assert committed(bootstrap, "browser-early", "late", 2) == {p: 0 for p in ends}
