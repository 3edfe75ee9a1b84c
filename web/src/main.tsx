import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { App } from "./app/App";
import { adoptInvitationFromLocation } from "./auth/invitation";
import { adoptTokenFromLocation, watchOtherTabs } from "./auth/token";
import "./styles.css";
import { applyTheme, loadTheme } from "./ui/shell";

adoptTokenFromLocation();
adoptInvitationFromLocation();
window.addEventListener("hashchange", () => {
  // a link followed within the page
  adoptTokenFromLocation();
  adoptInvitationFromLocation();
});
watchOtherTabs();

applyTheme(loadTheme()); // before the first paint: no flash of the other theme
createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
