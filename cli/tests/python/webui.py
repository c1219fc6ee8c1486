"""The playground page at `/` in a real headless browser (Debian's chromium through selenium):
the page loads without console errors and asks for the API key the server wants; a chat reply
streams into the page (the reply element grows chunk by chunk before the answer ends) with its
speed under it; a guard
scan draws one bar per risk, each as wide as the risk's probability, and a screenshot of the
guard panel is written to the path given; the policy picker lists the server's policies (a
`strict` one: harm at threshold 0) and a check under it marks harm unsafe at that threshold;
moderation of a pasted list fills one row per line.

    webui.py BASE_URL API_KEY CHROMEDRIVER SCREENSHOT.png
Exits non-zero on the first failed check."""

import re
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.support.ui import Select, WebDriverWait

base, key, chromedriver, screenshot = sys.argv[1:5]

options = webdriver.ChromeOptions()
for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,900", "--disable-gpu",
            "--no-first-run", "--disable-extensions", "--disable-background-networking"):
    options.add_argument(arg)
options.binary_location = "/usr/bin/chromium"
options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(service=Service(chromedriver), options=options)
# the page redraws its results as answers arrive: an element found just before a redraw is
# looked up again on the next poll
wait = WebDriverWait(driver, 60, ignored_exceptions=[StaleElementReferenceException])


def console_errors():
    # the 401 the page meets before it has the key is the server's answer, not a page error
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE" and "401" not in e["message"]]


try:
    driver.get(base + "/")
    assert driver.title == "engine playground", driver.title
    # the server wants a key: the page shows where to give it
    wait.until(lambda d: d.find_element(By.ID, "key-box").is_displayed())
    driver.find_element(By.ID, "api-key").send_keys(key)
    driver.find_element(By.ID, "key-save").click()
    wait.until(lambda d: len(Select(d.find_element(By.ID, "chat-model")).options) > 0)
    assert not driver.find_element(By.ID, "key-box").is_displayed()

    # chat: watch the reply grow, with the page's own DOM as it is drawn
    driver.execute_script("""
        window.__growth = [];
        new MutationObserver(() => {
            const r = document.querySelector('#chat-reply .content');
            if (r) window.__growth.push(r.textContent.length);
        }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
    """)
    driver.find_element(By.ID, "max-tokens").clear()
    driver.find_element(By.ID, "max-tokens").send_keys("48")
    # a fixed seed: a sampled reply of the tiny model may otherwise end after its first token
    driver.find_element(By.ID, "seed").send_keys("3")
    driver.find_element(By.ID, "chat-input").send_keys("Tell me a story.")
    # the tiny model decodes 48 tokens in milliseconds, so the stream could reach the page in one
    # read: a slow network (as a phone's) spreads its chunks out, as a real model's pace would
    driver.set_network_conditions(offline=False, latency=5, download_throughput=4096, upload_throughput=1 << 20)
    driver.find_element(By.ID, "chat-send").click()
    wait.until(lambda d: d.find_element(By.ID, "chat-send").is_enabled() and d.find_element(By.CSS_SELECTOR, "#chat-reply .content").text)
    driver.delete_network_conditions()
    growth = [n for n in driver.execute_script("return window.__growth") if n > 0]
    final = len(driver.find_element(By.CSS_SELECTOR, "#chat-reply .content").get_attribute("textContent"))
    assert len(set(growth)) >= 3 and growth == sorted(growth) and growth[-1] == final, (growth, final)
    assert driver.find_element(By.ID, "chat-error").text == ""
    # under the reply, its speed from the last chunk's timings
    stats = driver.find_element(By.CSS_SELECTOR, "#chat-reply .stats").text
    assert re.fullmatch(r"\d+ tokens, [\d.]+ tokens/s · prompt \d+ tokens, [\d.]+ tokens/s \(\d+ cached\)", stats), stats

    # guard: take the conversation, scan it, one bar per risk
    driver.find_element(By.CSS_SELECTOR, "nav button[data-tab=guard]").click()
    driver.find_element(By.ID, "guard-take").click()
    assert driver.find_element(By.ID, "guard-user").get_attribute("value") == "Tell me a story."
    # the tiny model's reply is random text: a readable one for the screenshot
    driver.find_element(By.ID, "guard-assistant").clear()
    driver.find_element(By.ID, "guard-assistant").send_keys("Once upon a time, a fox found a lantern in the snow.")
    driver.find_element(By.ID, "guard-check").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#guard-result .risk")) > 0)
    rows = driver.find_elements(By.CSS_SELECTOR, "#guard-result .risk")
    assert len(rows) >= 9, len(rows)
    for row in rows:
        probability = float(row.find_elements(By.TAG_NAME, "span")[1].text)
        fill = row.find_element(By.CLASS_NAME, "bar-fill")
        bar = row.find_element(By.CLASS_NAME, "bar")
        ratio = fill.size["width"] / bar.size["width"]
        assert abs(ratio - probability) < 0.02, (ratio, probability)
        assert row.find_element(By.CLASS_NAME, "bar-threshold").is_displayed()
    driver.find_element(By.ID, "guard").screenshot(screenshot)

    # risks named: those alone are judged
    driver.find_element(By.ID, "guard-risks").send_keys("harm")
    driver.find_element(By.ID, "guard-check").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#guard-result .risk")) == 1)
    assert "policy" not in driver.find_element(By.CSS_SELECTOR, "#guard-result p").text

    # a policy picked from the server's list: its threshold decides
    policy = Select(driver.find_element(By.ID, "guard-policy"))
    assert [o.text for o in policy.options] == ["none", "strict: flags every probability"], [o.text for o in policy.options]
    policy.select_by_value("strict")
    driver.find_element(By.ID, "guard-check").click()
    wait.until(lambda d: "policy strict" in d.find_element(By.CSS_SELECTOR, "#guard-result p").text)
    row = driver.find_element(By.CSS_SELECTOR, "#guard-result .risk")
    assert row.find_element(By.CLASS_NAME, "bar").get_attribute("title") == "threshold 0"
    assert row.find_element(By.CLASS_NAME, "verdict").text == "UNSAFE"

    # moderation of a list
    driver.find_element(By.CSS_SELECTOR, "nav button[data-tab=moderation]").click()
    driver.find_element(By.ID, "moderation-input").send_keys("hello there\nhave a nice day\nanother line")
    driver.find_element(By.ID, "moderation-check").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#moderation-result tr")) == 4)

    errors = console_errors()
    assert not errors, errors
    print("chat growth", growth[:8], "...", final, "characters")
    print("all checks passed")
finally:
    driver.quit()
