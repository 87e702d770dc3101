"""Drive Open WebUI in Debian's headless Chromium, as a person would: open the page, type a message, send it,
wait for the model's reply, save a screenshot. Runs under Debian's python3 with python3-selenium and
chromium-driver (apt), so it needs nothing from PyPI.

usage: browser.py URL MESSAGE SCREENSHOT.png [--timeout S]
Prints the reply's text on stdout; exit 1 (with the page's state saved as the screenshot) when no reply comes.
"""

import argparse
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

# Element ids in Open WebUI 0.12.4's frontend (open_webui/frontend/_app/immutable/**.js in the PyPI wheel).
CHAT_INPUT = "chat-input"
REPLY = "response-content-container"
STABLE_POLLS = 3  # the reply's text unchanged this many polls in a row: generation has ended
POLL_S = 2.0


def log(message: str) -> None:
    print(f"browser: {message}", file=sys.stderr, flush=True)


def wait_for(what: str, probe, deadline: float):
    while time.monotonic() < deadline:
        try:
            found = probe()
        except WebDriverException:
            found = None
        if found:
            return found
        time.sleep(POLL_S)
    raise TimeoutError(f"no {what} before the deadline")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("message")
    parser.add_argument("screenshot")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    deadline = time.monotonic() + args.timeout
    try:
        log(f"opening {args.url}")
        driver.get(args.url)
        box = wait_for("chat input", lambda: driver.find_element(By.ID, CHAT_INPUT), deadline)
        # A first visit may open the "what's new" dialog over the page.
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
        time.sleep(1)
        box = driver.find_element(By.ID, CHAT_INPUT)
        box.click()
        box.send_keys(args.message)
        box.send_keys(Keys.ENTER)
        log("message sent; waiting for the reply")
        last, same = None, 0
        while time.monotonic() < deadline:
            try:
                replies = driver.find_elements(By.ID, REPLY)
                text = replies[-1].text.strip() if replies else ""
            except WebDriverException:  # the page re-rendered the reply between finding and reading it (stale)
                text = None
            same = same + 1 if text and text == last else 0
            last = text
            if same >= STABLE_POLLS:
                break
            time.sleep(POLL_S)
        driver.save_screenshot(args.screenshot)
        if not last or same < STABLE_POLLS:
            log(f"no finished reply before the deadline (seen: {last!r}); screenshot {args.screenshot}")
            return 1
        print(last)
        return 0
    except TimeoutError as exc:
        driver.save_screenshot(args.screenshot)
        log(f"{exc}; screenshot {args.screenshot}")
        return 1
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
